"""Trajectory slots in shared memory: the slots themselves, who must hand a full slot back, a policy's part of their
rows, and the recurrent states carried from slot to slot.
"""
