"""The policy as samplers use it: an actor-critic kept at the newest published parameters.

Shared by the rollout worker's inline strategy and the inference worker, so both act the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from daskrl.config import INFERENCE_PRECISIONS
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


def cpu_has_native_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True on x86 CPUs that compute in bfloat16 natively (AVX512-BF16 or AMX), from the kernel's CPU flags.

    torch has no public check, and its oneDNN check also says yes where bfloat16 is only emulated (slower than
    float32). Elsewhere (no /proc/cpuinfo, other architectures) this says False: float32 is the safe side.
    """
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def resolve_precision(setting: str, spaces: EnvSpaces) -> str:
    """'auto' is bfloat16 for image policies on a CPU with native bfloat16, float32 otherwise (an MLP is too small
    to gain from it and takes the numpy path)."""
    if setting not in INFERENCE_PRECISIONS:
        raise ValueError(f"inference precision must be one of {', '.join(INFERENCE_PRECISIONS)}, got {setting!r}")
    if setting == "auto":
        return "bfloat16" if spaces.is_image and cpu_has_native_bfloat16() else "float32"
    return setting


class SamplingPolicy:
    """``act(obs)`` with the newest parameters; ``refresh()`` pulls a newer version if there is one."""

    def __init__(self, component, spaces: EnvSpaces, model_cfg: dict[str, Any], params_desc: dict | None,
                 seed: int = 0, numpy_inference: bool = True, precision: str = "auto") -> None:
        torch.set_num_threads(1)  # one busy component per core: intra-op threads would only fight
        self.model = build_model(spaces, model_cfg, seed)
        self.model.eval()
        self.precision = resolve_precision(precision, spaces)
        if self.precision == "bfloat16":
            self.model.use_bfloat16_encoders()
        # float32 MLP policies act through the numpy fast path (same function, a fraction of torch's per-op
        # overhead)
        self.fast = NumpyPolicy(self.model, np.random.default_rng(seed)) \
            if numpy_inference and self.precision == "float32" and NumpyPolicy.supports(self.model) else None
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
