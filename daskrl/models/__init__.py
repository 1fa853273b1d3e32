"""Policy/value networks: encoders (``inputs/``), recurrent cores, action distributions, the ActorCritic, and the
registry that names encoders and cores (and ships the user's to worker processes); the numpy fast path
(``fast_path/``). No Dask here.

The names below are imported on first use (PEP 562), not with the package: checking a run's options reads the
registry (``daskrl.models.registry``, no torch) before the process that will use torch has started.
"""

from __future__ import annotations

from daskrl.lazy_names import lazy_names

_HOMES = {
    "ActorCritic": "actor_critic", "build_model": "actor_critic",
    "CnnEncoder": "inputs.encoders", "MlpEncoder": "inputs.encoders", "layer_init": "inputs.encoders",
    "make_encoder": "inputs.encoders",
    "Categorical": "heads", "DiagGaussian": "heads", "MultiCategorical": "heads", "make_action_head": "heads",
    "RecurrentCore": "recurrent",
    "register_core": "registry", "register_encoder": "registry",
}

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
