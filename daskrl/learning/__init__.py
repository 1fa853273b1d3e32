"""Learner-side components."""

from daskrl.learning.checkpoints import CheckpointStore

__all__ = ["CheckpointStore"]
