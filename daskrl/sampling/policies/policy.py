"""The policy as samplers use it: an actor-critic kept at the newest published parameters.

Shared by the rollout worker's inline strategy and the inference worker, so both act the same way. Two ways to
act: the numpy fast path from the published weights and the learner's plan (:mod:`daskrl.models.fast_path.numpy_plan`), which
never imports torch, so a rollout worker on it carries none; or the torch model, for everything else (CNNs, bfloat16,
GPUs, custom parts) and for samplers without a learner (a sampling-only run acts with its own initial weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskrl.config import INFERENCE_PRECISIONS
from daskrl.devices import cpu_has_native_bfloat16
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.fast_path.numpy_policy import NumpyPolicy
from daskrl.runtime.memory.params import ParameterReader
from daskrl.sampling.policies.exploration import Acted, exploring
from daskrl.setups import PolicySetup


def resolve_precision(setting: str, spaces: EnvSpaces) -> str:
    """'auto' is bfloat16 for image policies on a CPU with native bfloat16, float32 otherwise (an MLP is too small
    to gain from it and takes the numpy path)."""
    if setting not in INFERENCE_PRECISIONS:
        raise ValueError(f"inference precision must be one of {', '.join(INFERENCE_PRECISIONS)}, got {setting!r}")
    if setting == "auto":
        # a Dict's image keys too, where the Nature CNN encodes them (the measured gain: docs/performance.md); MiniGrid's
        # small views keep float32, as measured
        has_image = spaces.is_image or any(k.kind == "image" and min(k.shape[:2]) >= 36 for k in spaces.feature_keys)
        return "bfloat16" if has_image and cpu_has_native_bfloat16() else "float32"
    return setting


class SamplingPolicy:
    """``act(obs)`` with the newest parameters; ``refresh()`` pulls a newer version if there is one."""

    def __init__(self, component: Any, setup: PolicySetup) -> None:
        """``component`` owns the parameter reader (its counters record each version taken); None in tests that
        act without parameters."""
        self.version = 0
        if setup.repeatable:  # before any model acts: a timed kernel choice could differ from its twin's
            from daskrl.models.inputs.activations import pin_standard_tanh

            pin_standard_tanh()
        self.reader = ParameterReader(component, setup.params) if setup.params is not None else None
        self.published: dict[str, np.ndarray] | None = None  # the weights of ``version`` as published (float32)
        self.model: Any = None  # the torch model (None on the numpy path from published weights)
        self.torch_generator: Any = None  # what the torch model samples from (None: torch's own generator)
        plan = (setup.params or {}).get("numpy_plan")
        if plan is not None and self.reader is not None and setup.numpy_inference and setup.device == "cpu" \
                and resolve_precision(setup.inference_precision, setup.spaces) == "float32":
            self.device, self.precision = "cpu", "float32"
            self.version, self.published = self.reader.first()
            self.fast: NumpyPolicy | None = NumpyPolicy(plan, self.published, np.random.default_rng(setup.seed),
                                                          critic=False)
            self.recurrent = self.fast.recurrent
        else:
            self._build_torch_model(component, setup)
            if setup.weights is not None:  # a sampling-only run of a trained policy: its weights, for good
                self.take(setup.weights["version"], setup.weights["weights"])
        #: acts for the samplers: the policy's own sampling, or wrapped by its exploration (DQN's epsilon-greedy)
        self.act = exploring(self._act, setup.exploration, setup.seed)

    def _build_torch_model(self, component: Any, setup: PolicySetup) -> None:
        """The torch model, acting through numpy where it can (a float32 MLP on the CPU)."""
        import torch

        from daskrl import devices
        from daskrl.models.actor_critic import build_model
        from daskrl.models.registry import install_components

        torch.set_num_threads(1)  # one busy component per core: intra-op threads would only fight
        where = f"worker {component.worker.name} ({component.worker.address})" if component is not None else "here"
        self.device = devices.resolve(setup.device, where, "--inference-device")
        install_components(setup.components)  # the user's encoders and cores, registered where the run started
        self.model = build_model(setup.spaces, setup.model, setup.seed).to(self.device)
        self.model.eval()
        self.recurrent = self.model.recurrent
        # on a GPU the policy runs in float32 unless bfloat16 is asked for (the CPU check below is about CPUs)
        self.precision = resolve_precision(setup.inference_precision, setup.spaces) \
            if self.device.type == "cpu" or setup.inference_precision != "auto" else "float32"
        if self.precision == "bfloat16":
            self.model.use_bfloat16_encoders()
        # float32 MLP policies on the CPU act through the numpy fast path (same function, a fraction of torch's
        # per-op overhead)
        self.fast = NumpyPolicy.from_model(self.model, np.random.default_rng(setup.seed), critic=False) \
            if setup.numpy_inference and self.precision == "float32" and self.device.type == "cpu" \
            and NumpyPolicy.supports(self.model) else None

    def follow(self, component: Any, params: dict) -> None:
        """Read parameters from a new publisher (a restarted learner) and take whatever version it has next."""
        self.reader = ParameterReader(component, params)
        self.version = -1

    def weights(self) -> dict[str, Any]:
        """The version and weights this policy acts with (float32 numpy), e.g. for a learner restarted before its
        first checkpoint."""
        if self.published is None:  # the torch model's initial weights (no version taken yet); numpy has no bfloat16
            import torch

            return {"version": self.version, "weights": {
                k: (v.float() if v.dtype == torch.bfloat16 else v).detach().cpu().numpy().copy()
                for k, v in self.model.state_dict().items()}}
        return {"version": self.version, "weights": self.published}

    def refresh(self) -> bool:
        """Load newer parameters if published; True if the model changed."""
        if self.reader is None:
            return False
        got = self.reader.newer_than(self.version)
        if got is None:
            return False
        self.take(*got)
        return True

    def take(self, version: int, state: dict[str, np.ndarray]) -> None:
        """Act with ``state`` as policy version ``version`` from now on (a replay hands each step's version so)."""
        self.version = version
        self.published = state
        if self.fast is not None:  # a torch model beside it keeps its initial weights: weights() reads published now
            self.fast.load(state)
        else:
            self.model.load_state_dict_numpy(state)

    def generator(self, seed: int, split: int) -> Any:
        """A generator of split ``split``'s own, from ``seed`` and the split's index, of the kind this policy samples
        with: numpy's on the numpy path, torch's for the torch model."""
        if self.fast is not None:
            return np.random.default_rng([seed, split])
        import torch

        return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, split]).generate_state(1)[0]))

    def draw_from(self, generator: Any) -> None:
        """Sample the next actions from ``generator`` (one of :meth:`generator`'s: each split of a rollout worker has
        its own, since which split acts first at a turn depends on timing, and a shared generator would make the
        draws depend on it too)."""
        if self.fast is not None:
            self.fast.rng = generator
        else:
            self.torch_generator = generator

    def _act(self, obs: np.ndarray, state: np.ndarray | None = None, deterministic: bool = False) -> Acted:
        """Actions, log-probs and values for ``obs`` (values None on the numpy path: samplers write none); a recurrent
        policy acts from ``state`` [batch, S] and writes the next states there. Samplers call ``self.act`` (this, or
        this wrapped by an exploration)."""
        if self.fast is not None:
            return self.fast.act(obs, deterministic, state=state)
        return self.model.act(obs, deterministic, state=state, generator=self.torch_generator)
