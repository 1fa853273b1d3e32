"""The policy as samplers use it: an actor-critic kept at the newest published parameters.

Shared by the rollout worker's inline strategy and the inference worker, so both act the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from daskrl.envs.spaces import EnvSpaces
from daskrl.models.actor_critic import ActorCritic
from daskrl.models.numpy_policy import NumpyPolicy


def build_model(spaces: EnvSpaces, model_cfg: dict[str, Any], seed: int = 0) -> ActorCritic:
    """The one place where config turns into a network (learner and samplers build the same one)."""
    torch.manual_seed(seed)
    return ActorCritic(
        spaces,
        encoder=model_cfg.get("encoder", "auto"),
        hidden=tuple(model_cfg.get("hidden_sizes", (64, 64))),
        activation=model_cfg.get("activation", "tanh"),
        normalize_obs=model_cfg.get("normalize_obs", False),
    )


class SamplingPolicy:
    """``act(obs)`` with the newest parameters; ``refresh()`` pulls a newer version if there is one."""

    def __init__(self, component, spaces: EnvSpaces, model_cfg: dict[str, Any], params_desc: dict | None,
                 seed: int = 0, numpy_inference: bool = True) -> None:
        torch.set_num_threads(1)  # one busy component per core: intra-op threads would only fight
        self.model = build_model(spaces, model_cfg, seed)
        self.model.eval()
        # MLP policies act through the numpy fast path (same function, a fraction of torch's per-op overhead)
        self.fast = NumpyPolicy(self.model, np.random.default_rng(seed)) \
            if numpy_inference and NumpyPolicy.supports(self.model) else None
        self.version = 0
        self.reader = None
        if params_desc is not None:
            from daskrl.runtime.params import ParameterReader

            self.reader = ParameterReader(component, params_desc)

    def refresh(self) -> bool:
        """Load newer parameters if published; True if the model changed."""
        if self.reader is None:
            return False
        got = self.reader.newer_than(self.version)
        if got is None:
            return False
        self.version, state = got
        self.model.load_state_dict_numpy(state)
        if self.fast is not None:
            self.fast.refresh()
        return True

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.fast is not None:
            return self.fast.act(obs)
        return self.model.act(obs)
