"""Data that stays put: shared-memory numpy arrays, versioned parameter blocks, bulk reads of another host's arrays,
and how a learner keeps the memory it frees.
"""
