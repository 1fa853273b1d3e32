"""``daskrl replay``: an asynchronous run's recorded schedule (--record-schedule) re-executed in one process.

The run recorded which split of which rollout worker filled each slot with which policy versions, and which slots
each training step took in which order (:mod:`daskrl.monitor.outputs.schedule_file`). A replay steps the same envs
(seeded as the run seeded them) through the same slots, acting at each step with the version the run acted with,
and feeds a learner built as the run's was the same batches in the same order: the weights, the optimizer and every
step's metrics come out the same, bit for bit, on a machine with the same packages and instruction sets.

- :mod:`.schedule_index`: which recorded fill each training step took, and what a replay refuses;
- :mod:`.scheduled_sampler`: a rollout worker stepped one slot at a time with the recorded versions;
- :mod:`.scheduled_learner`: the learner's model and trainer, fed the recorded batches;
- :mod:`.replay`: the re-execution, its checkpoint and its verdict.
"""

from typing import Any

__all__ = ["replay_experiment"]


def __getattr__(name: str) -> Any:
    """``replay_experiment``, imported when first asked for: the command line imports this package for its flags and
    must not import torch before a run's checks (tests/drills/test_startup.py)."""
    if name == "replay_experiment":
        from daskrl.rerun.replay import replay_experiment

        return replay_experiment
    raise AttributeError(f"module 'daskrl.rerun' has no attribute {name!r}")
