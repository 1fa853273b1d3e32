"""How signals travel: the topic bus on each worker, the scheduler's registry of who lives where and listens to
what, and the wiring of signals to slots and work queues.
"""
