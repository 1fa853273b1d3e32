"""Twin Q critics with their Polyak target and their own optimizer: the part of an actor-critic update that SAC,
TD3, IQL and CQL keep alike (here, beside SAC's losses, which the others import too).

Why one type: each of them builds the two critics, a frozen copy as the target, an optimizer over the critics alone
and the list of their parameters (gradients go there only), moves the target by ``tau`` after an update and saves
the three under the same checkpoint keys. What differs between the algorithms is the target the critics regress on
and what the actor does with them, which stays in each trainer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from daskrl.algo.common.optimizers import load_moments
from daskrl.algo.sac.loss import SoftUpdate
from daskrl.config import ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.inputs.observations import EncoderInput
from daskrl.models.q_critics import TwinQ


class TargetedCritics:
    """:class:`TwinQ` critics (called as they are: ``critics(inputs, actions) -> (Q_1, Q_2)``), their ``target``,
    ``optimizer`` and ``params``."""

    def __init__(self, spaces: EnvSpaces, model_cfg: ModelConfig, adam: Callable[..., torch.optim.Optimizer],
                 learning_rate: float, device: torch.device, joint: bool | None = None) -> None:
        """``adam``: the trainer's Adam (its kernels'); ``joint``: :class:`TwinQ`'s layout (None: the current one)."""
        self.net = TwinQ(spaces, model_cfg, joint).to(device)
        self.target = copy.deepcopy(self.net).requires_grad_(False)
        self.optimizer = adam(self.net.parameters(), lr=learning_rate)
        self.params = list(self.net.parameters())  # loading copies into these tensors: the list stays right
        self.soft_update = SoftUpdate(self.target, self.net)

    def __call__(self, inputs: EncoderInput, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net(inputs, actions)

    @property
    def joint(self) -> bool:
        return self.net.joint

    def state(self) -> dict[str, Any]:
        """The critics, their target and their optimizer, under the checkpoint keys SAC's first checkpoints had."""
        return {"critics": self.net.state_dict(), "target_critics": self.target.state_dict(),
                "critic_optimizer": self.optimizer.state_dict()}

    def load(self, state: dict[str, Any]) -> None:
        """Load what :meth:`state` saved (into the same tensors)."""
        self.net.load_state_dict(state["critics"])
        self.target.load_state_dict(state["target_critics"])
        load_moments(self.optimizer, state["critic_optimizer"])

    @staticmethod
    def saved_joint(state: dict[str, Any]) -> bool:
        """Whether a checkpoint's critics are joint MLPs of [observation, action] (not so before daskrl built MLP
        critics that way)."""
        return not any(key.startswith("heads.0.0.") for key in state["critics"])
