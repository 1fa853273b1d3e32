"""The learning math, pure torch and numpy (no Dask), one folder per algorithm over what they share:

- :mod:`.appo`: APPO, PPO's clipping with V-trace (or GAE): the loss, the advantage estimators, the policy-lag mask,
  the trajectory batch a batcher builds and the ways it is walked (shuffled steps, whole sequences), the trainer;
- :mod:`.dqn` and :mod:`.sac`: each one's loss and trainer on replay minibatches;
- :mod:`.common`: what the trainers share (the trainer base, the off-policy update loop, normalizers, optimizers,
  learning-rate schedules, the collectives of a learner group);
- :mod:`.kernels`: hand-written fast paths (an MLP's minibatch gradients, flat parameters, an unwrapped Adam step),
  each checked against the plain torch reference, taken with ``--learner-kernels auto`` (``off``: plain torch).

The names below are imported on first use (PEP 562): the driver imports this package's torch-free modules (the
trajectory batch a batcher builds) without importing torch.
"""

from __future__ import annotations

from daskrl.lazy_names import lazy_names

_HOMES = {
    "gae": "appo.advantages", "vtrace": "appo.advantages",
    "LossOutput": "appo.loss", "policy_lag_mask": "appo.loss",
    "ReturnNormalizer": "common.normalizers", "RunningMeanStd": "common.normalizers",
}

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
