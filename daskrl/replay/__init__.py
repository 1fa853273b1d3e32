"""Experience replay for off-policy algorithms: transitions kept for reuse, drawn uniformly or by priority.

The pieces are plain numpy, one job each: :mod:`~daskrl.replay.n_step` turns a full trajectory slot into n-step
transitions, :mod:`~daskrl.replay.store` keeps them in a ring of preallocated arrays (any arrays: plain numpy, or
shared memory on the shard's host), :mod:`~daskrl.replay.sum_tree` finds a draw by priority in O(log n) and
:mod:`~daskrl.replay.sampler` draws minibatches, uniform or prioritized with importance weights.
"""

from daskrl.replay.n_step import Transitions, slot_transitions
from daskrl.replay.sampler import Draw, PrioritizedSampler, UniformSampler
from daskrl.replay.store import TransitionStore
from daskrl.replay.sum_tree import SumTree

__all__ = ["Draw", "PrioritizedSampler", "SumTree", "TransitionStore", "Transitions", "UniformSampler",
           "slot_transitions"]
