"""Nothing left behind: what the host says of its processes (psutil, and /proc where it is faster), the
shared-memory segments and semaphores a run holds, and the small processes that remove them when their owners die.
"""
