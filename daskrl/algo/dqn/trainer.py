"""One DQN update on a replay minibatch: pure torch, no Dask (the off-policy learner component wraps it).

The network is the run's :class:`~daskrl.models.actor_critic.ActorCritic` read as a Q-network: the action head's
outputs are the advantages and the value head the state value, combined by the dueling rule (``--dueling``), or
the action head's outputs alone are the Q-values. So observation normalization, Dict observations, the Nature CNN,
checkpoints, the parameter store and ``enjoy`` (whose deterministic action is the head's argmax, the greedy
action) work unchanged. A target network, a copy refreshed every ``--target-update-interval`` updates, rates the
bootstrap action; with ``--double-q`` the online network picks it. Observation statistics follow the observations
the learner trains on.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from daskrl.algo.common.optimizers import load_moments
from daskrl.algo.common.replay_steps import ReplayTrainer, grad_norm
from daskrl.algo.dqn.loss import dqn_loss, dqn_targets, dueling

if TYPE_CHECKING:
    from daskrl.algo.common.policy_trainer import TrainerOptions
    from daskrl.config import AlgoConfig, LearnerConfig
    from daskrl.models.actor_critic import ActorCritic


def q_values(net: ActorCritic, obs: torch.Tensor, use_dueling: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, A] Q-values of ``obs`` (a feed-forward model), and the action mask of Dict observations (or None)."""
    policy, value, mask = net.head_inputs(obs, with_value=use_dueling)
    advantages = net.actor.logits(policy)
    if not use_dueling:
        return advantages, mask
    return dueling(net.critic(value), advantages), mask


class DQNTrainer(ReplayTrainer):
    """Owns the online and target networks and the optimizer of one policy (the rest: :class:`ReplayTrainer`)."""

    @classmethod
    def from_options(cls, model: ActorCritic, options: TrainerOptions, device: torch.device) -> DQNTrainer:
        return cls(model, options.learner, options.algo, device)

    def __init__(self, model: ActorCritic, cfg: LearnerConfig, algo: AlgoConfig, device: torch.device | None = None
                 ) -> None:
        super().__init__(model, cfg, device)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        self.algo = algo
        self.optimizer = self.kernels.adam(model.parameters(), lr=self.hp["learning_rate"])
        self.params = list(model.parameters())  # (loading a checkpoint copies into these: the list stays right)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def follow_obs(self, obs: np.ndarray) -> None:
        """Observation statistics follow the observations about to be trained on (both networks normalize so)."""
        self.obs_rms.update(self.model.obs_for_stats(obs))
        for net in (self.model, self.target):
            net.set_obs_stats(self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count)

    def update(self, t: dict[str, torch.Tensor], weights: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """One update on one minibatch of tensors; its metrics (0-d tensors) and TD errors, or None where the loss
        or the gradients were not finite (nothing applied)."""
        with torch.no_grad():
            next_target, mask = q_values(self.target, t["next_obs"], self.algo.dueling)
            next_online = q_values(self.model, t["next_obs"], self.algo.dueling)[0] if self.algo.double_q else None
            if mask is not None:  # the bootstrap action is one the env allows
                allowed = (mask > 0.5) | ~(mask > 0.5).any(-1, keepdim=True)
                next_online = (next_online if next_online is not None else next_target).masked_fill(~allowed,
                                                                                                  -math.inf)
            targets = dqn_targets(t["rewards"].float(), t["discounts"].float(), next_target, next_online)
        q = q_values(self.model, t["obs"], self.algo.dueling)[0]
        out = dqn_loss(q, t["actions"].reshape(-1), targets, weights)
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        norm = grad_norm(self.params, self.cfg.max_grad_norm)
        if not bool(torch.isfinite(out.loss) & torch.isfinite(norm)):  # the one sync an update needs
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.kernels.step(self.optimizer)
        self.train_steps += 1
        self.samples_trained += len(weights)
        if self.train_steps % self.algo.target_update_interval == 0:
            torch._foreach_copy_(list(self.target.state_dict().values()), list(self.model.state_dict().values()))
        metrics = {"loss": out.loss, "q_mean": out.q_mean, "td_abs_mean": out.td_errors.abs().mean(),
                   "grad_norm": norm, "importance_weight_mean": weights.mean()}
        return metrics, out.td_errors

    # ---- checkpoints ----

    def own_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "returns": None}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.target.load_state_dict(state.get("target") or state["model"])
        load_moments(self.optimizer, state["optimizer"])

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from published weights alone (a learner lost before its first checkpoint): the target network
        starts as a copy, Adam afresh, the observation statistics from the weights' buffers."""
        self.load_model_weights(weights)
        self.target.load_state_dict(self.model.state_dict())
