"""Nothing left behind: what /proc says of processes, the shared-memory segments and semaphores a run holds, and the
small processes that remove them when their owners die.
"""
