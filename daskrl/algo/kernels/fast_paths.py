"""``--learner-kernels auto``: each fast path of this folder where it applies, plain torch where none does.

Why one object: it is the only code that knows which kernels there are and when each one applies; the trainers ask
it as they would ask :class:`~daskrl.algo.common.plain_torch.PlainTorch` (``off``), whose methods it overrides with
the kernels: Adam and AdamW whose step calls torch's fused kernel itself (:mod:`.eager_optim`), that step without
torch.optim's wrapper, a gradient-norm clip without torch's grouping of the gradients, and an MLP actor-critic's
APPO gradients written out (:mod:`.mlp_gradients`) into one flat parameter buffer (:mod:`.flat_parameters`).
:func:`~daskrl.algo.common.policy_trainer.learner_kernels` imports this module only when ``auto`` is chosen, so a
run with ``off`` loads none of the kernels (nor eager_optim's change to torch.optim's compiler wrappers).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.common.plain_torch import PlainTorch
from daskrl.algo.kernels.eager_optim import EagerAdam, EagerAdamW, step_unwrapped
from daskrl.algo.kernels.flat_parameters import FlatParameters
from daskrl.algo.kernels.mlp_gradients import MlpGradients

if TYPE_CHECKING:
    from daskrl.models.actor_critic import ActorCritic


class FastPaths(PlainTorch):
    """``--learner-kernels auto`` (see the module docstring); each method gives what :class:`PlainTorch`'s gives, a
    test apiece says so (tests/drills/test_learner_kernels.py, tests/unit/test_mlp_gradients.py)."""

    name = "auto"

    def adam(self, params: Iterable[torch.nn.Parameter], adamw: bool = False, **settings: Any
             ) -> torch.optim.Optimizer:
        """:mod:`.eager_optim`'s Adam (AdamW with ``adamw``), with torch's fused kernel (one update of every
        parameter in one call, same arithmetic, same state dict) where every parameter is a float tensor on one CPU
        or GPU; otherwise ``foreach``, one multi-tensor update instead of a Python loop over parameters (on CPU
        torch defaults to the loop). bench_learner's CartPole MLP step gains about 5% over foreach."""
        params = list(params)
        kernel = {"fused": True} if _fusable(params) else {"foreach": True}
        return (EagerAdamW if adamw else EagerAdam)(params, **settings, **kernel)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        step_unwrapped(optimizer)

    def clip_grad_norm(self, params: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
        return clip_grad_norm(params, max_norm)

    def mlp_gradients(self, model: ActorCritic, optimizer: torch.optim.Optimizer
                      ) -> tuple[MlpGradients, FlatParameters] | None:
        """Where :class:`MlpGradients` covers ``model``: the model's parameters made views of one buffer, its
        gradients written out into the buffer's gradient views, and ``optimizer`` (this object's Adam) stepping the
        buffer in one call."""
        if not MlpGradients.supports(model):
            return None
        flat = FlatParameters(model.parameters())
        if isinstance(optimizer, EagerAdam | EagerAdamW):
            optimizer.step_flat(flat)
        return MlpGradients(model, flat), flat


def clip_grad_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_(parameters, max_norm)``: the same operations in the same order (each
    gradient's norm in one foreach call, the norm of those norms, one scale of every gradient by
    min(1, max_norm / (norm + 1e-6))), so the same result to the bit, without its grouping of the gradients by device
    and dtype (184 of a CartPole learner's 1,700 us a minibatch). Gradients on several devices or of several dtypes,
    or of a kind foreach does not take, go to torch's function."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    kinds = {(g.device, g.dtype, g.layout) for g in grads}
    if len(kinds) != 1 or grads[0].layout != torch.strided or grads[0].device.type not in ("cpu", "cuda"):
        return torch.nn.utils.clip_grad_norm_(grads, max_norm)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def _fusable(params: list[torch.nn.Parameter]) -> bool:
    """Whether torch's fused Adam takes ``params``: float tensors, all on one CPU or GPU."""
    devices = {p.device.type for p in params}
    return bool(params) and devices <= {"cpu", "cuda"} and len({p.device for p in params}) == 1 \
        and all(p.is_floating_point() for p in params)
