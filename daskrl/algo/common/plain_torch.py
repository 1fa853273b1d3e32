"""How a trainer takes its gradients and steps its optimizers, in plain torch (``--learner-kernels off``).

Why a strategy object: the hand-written fast paths of :mod:`daskrl.algo.kernels` each compute what plain torch
computes (a test apiece holds them to it), and ``--learner-kernels`` chooses between the two once, in
:func:`~daskrl.algo.common.policy_trainer.learner_kernels`. A trainer asks the object it gets for its optimizers,
their step, the gradient-norm clip and whether an MLP's gradients are written out, and never reads the setting.
:class:`PlainTorch` is ``off``: nn modules, autograd and torch.optim as any torch program would train, the reference
the kernels are measured against and the way to rule them out when a run misbehaves or a torch upgrade breaks one.
``auto`` is :class:`~daskrl.algo.kernels.fast_paths.FastPaths`, the same methods with the kernels where they apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from daskrl.algo.kernels.flat_parameters import FlatParameters
    from daskrl.algo.kernels.mlp_gradients import MlpGradients
    from daskrl.models.actor_critic import ActorCritic


class PlainTorch:
    """``--learner-kernels off``: torch.optim's Adam and AdamW with torch's defaults, their own ``step``, torch's
    ``clip_grad_norm_``, every gradient through autograd."""

    #: the value of --learner-kernels this object stands for
    name = "off"

    def adam(self, params: Iterable[torch.nn.Parameter], adamw: bool = False, **settings: Any
             ) -> torch.optim.Optimizer:
        """Adam (AdamW with ``adamw``: decoupled weight decay) over ``params`` with ``settings`` (``lr``, ``eps``,
        ``weight_decay``), torch.optim's own."""
        return (torch.optim.AdamW if adamw else torch.optim.Adam)(list(params), **settings)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """Apply ``optimizer``'s update to the gradients its parameters hold."""
        optimizer.step()

    def clip_grad_norm(self, params: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
        """Scale the gradients of ``params`` to a total norm of at most ``max_norm``; -> their norm before."""
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def mlp_gradients(self, model: ActorCritic, optimizer: torch.optim.Optimizer
                      ) -> tuple[MlpGradients, FlatParameters] | None:
        """``model``'s minibatch gradients written out, and its parameters in one flat buffer ``optimizer`` steps,
        where this object gives them; None: through autograd (always, in plain torch)."""
        return None
