"""One behavior-cloning update on a minibatch of a dataset preloaded in the replay shards: pure torch, no Dask.

The policy is the run's :class:`~daskrl.models.actor_critic.ActorCritic` (its value head is not trained). Box
actions: its mode (with ``--action-bounds squash_mean --gaussian-std parameter``, the tanh-squashed mean) follows
the dataset action by squared error; discrete and multi-discrete actions: its categorical head by cross-entropy
(:mod:`daskrl.algo.bc.loss`). There is no critic, so the TD errors (new priorities, dropped for dataset rows) are 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.bc.loss import cross_entropy_loss, mode_regression_loss
from daskrl.algo.common.optimizers import load_moments
from daskrl.algo.common.replay_steps import ReplayTrainer

if TYPE_CHECKING:
    from daskrl.algo.common.policy_trainer import TrainerOptions
    from daskrl.config import LearnerConfig
    from daskrl.models.actor_critic import ActorCritic

#: the action kinds behavior cloning fits (a composite action's parts would each need their own loss)
BC_ACTION_KINDS = ("box", "discrete", "multi_discrete")


class BCTrainer(ReplayTrainer):
    """Owns the policy's optimizer (the rest: :class:`ReplayTrainer`)."""

    finite_fields = ("obs", "actions")  # rewards and next observations are never read

    @classmethod
    def from_options(cls, model: ActorCritic, options: TrainerOptions, device: torch.device) -> BCTrainer:
        return cls(model, options.learner, device)

    def __init__(self, model: ActorCritic, cfg: LearnerConfig, device: torch.device | None = None) -> None:
        if model.spaces.action_kind not in BC_ACTION_KINDS:
            raise ValueError(f"behavior cloning fits {', '.join(BC_ACTION_KINDS)} actions, not "
                             f"{model.spaces.action_kind} ones")
        super().__init__(model, cfg, device)
        self.box = model.spaces.action_kind == "box"
        self.optimizer = self.kernels.adam(model.parameters(), lr=self.hp["learning_rate"])
        self.actor_params = list(model.parameters())

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def update(self, t: dict[str, torch.Tensor], w: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """One step of the policy towards the dataset's actions; its metrics (0-d tensors) and zero TD errors, or
        None where the loss was not finite (nothing applied)."""
        features, _, mask = self.model.head_inputs(t["obs"], with_value=False)  # the value head is not BC's
        dist = self.model.actor(features, mask)
        if self.box:
            actions = t["actions"].reshape(len(w), -1).float()
            modes = dist.mode()
            loss = mode_regression_loss(modes, actions, w)
            fit = {"action_error": (modes.detach() - actions).abs().mean()}
        else:
            actions = t["actions"].long().reshape(len(w), *self.model.spaces.action_shape)
            loss = cross_entropy_loss(dist.log_prob(actions), w)
            hits = (dist.mode() == actions).reshape(len(w), -1).all(-1)
            fit = {"accuracy": hits.float().mean()}
        if not bool(torch.isfinite(loss)):
            return None
        norm = self.step_into(self.optimizer, loss, self.actor_params)
        self.train_steps += 1
        self.samples_trained += len(w)
        metrics = {"loss": loss.detach(), "grad_norm": norm, **fit, "importance_weight_mean": w.mean()}
        return metrics, torch.zeros_like(w, dtype=torch.float32)

    # ---- checkpoints ----

    def own_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "returns": None}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        load_moments(self.optimizer, state["optimizer"])

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from the published policy alone (a learner lost before its first checkpoint): it is all BC
        trains; the optimizer's moments start afresh."""
        self.load_model_weights(weights)
