"""One IQL update on a minibatch of a dataset preloaded in the replay shards (Kostrikov et al. 2021): pure torch, no
Dask (the off-policy learner wraps it).

The actor is the run's :class:`~daskrl.models.actor_critic.ActorCritic` with the official code's MuJoCo policy: the
mean squashed into the action box by tanh and a state-independent log-std (``--action-bounds squash_mean
--gaussian-std parameter``); evaluation takes its mode, and its value head is not trained. The twin critics
(:class:`~daskrl.models.q_critics.TwinQ`), their Polyak target and the state value V
(:class:`~daskrl.models.state_value.StateValue`) live here only. Per minibatch, in the official code's order: V
regresses on an expectile of the target critics' ``min Q(s, a)``; the actor on the dataset action weighted by
``exp(beta (min Q - V))``; the critics on ``r + discount * V(s')``; the target critics move by ``--target-tau``
(:mod:`daskrl.algo.iql.loss`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.common.optimizers import load_moments
from daskrl.algo.common.replay_steps import ReplayTrainer, own_learning_rate
from daskrl.algo.iql.loss import awr_actor_loss, awr_weights, expectile_loss
from daskrl.algo.sac.critics import TargetedCritics
from daskrl.algo.sac.loss import critic_loss
from daskrl.models.state_value import StateValue

if TYPE_CHECKING:
    from daskrl.algo.common.policy_trainer import TrainerOptions
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.models.actor_critic import ActorCritic


class IQLTrainer(ReplayTrainer):
    """Owns the twin critics and their target, the state value and the three optimizers of one policy (the actor is
    the model; the rest: :class:`ReplayTrainer`)."""

    finite_fields = ("obs", "rewards", "next_obs", "actions")

    @classmethod
    def from_options(cls, model: ActorCritic, options: TrainerOptions, device: torch.device) -> IQLTrainer:
        return cls(model, options.model, options.learner, options.algo, device)

    def __init__(self, model: ActorCritic, model_cfg: ModelConfig, cfg: LearnerConfig, algo: AlgoConfig,
                 device: torch.device | None = None) -> None:
        """``model_cfg``: the options the actor was built with; the critics and V are built the same way."""
        if model.spaces.action_kind != "box":
            raise ValueError(f"IQL's actor regresses Box actions, not {model.spaces.action_kind} ones")
        super().__init__(model, cfg, device)
        self.algo = algo
        lr = self.hp["learning_rate"]
        self.optimizer = self.kernels.adam(model.parameters(), lr=lr)  # the actor's: "optimizer" in checkpoints
        own_learning_rate(self.optimizer, algo.actor_learning_rate, lr)
        self.actor_params = list(model.parameters())
        self.critics = TargetedCritics(model.spaces, model_cfg, self.kernels.adam, lr, self.device)
        self.value = StateValue(model.spaces, model_cfg).to(self.device)
        self.value_optimizer = self.kernels.adam(self.value.parameters(), lr=lr)
        self.value_params = list(self.value.parameters())

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer, self.critics.optimizer, self.value_optimizer]

    def update(self, t: dict[str, torch.Tensor], w: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """V, then the actor, then the critics, then their target, on one minibatch of tensors; its metrics (0-d
        tensors) and the critics' TD errors, or None where V's loss was not finite (nothing applied)."""
        inputs, next_inputs = self.model.prepare(t["obs"])[0], self.model.prepare(t["next_obs"])[0]
        actions = t["actions"].reshape(len(w), -1).float()
        with torch.no_grad():
            target_q = torch.minimum(*self.critics.target(inputs, actions))
        value_loss = expectile_loss(target_q - self.value(inputs), self.algo.iql_expectile, w)
        if not bool(torch.isfinite(value_loss)):
            return None
        self.step_into(self.value_optimizer, value_loss, self.value_params)
        with torch.no_grad():  # the actor and the critics read the V just updated, as the official code's do
            value, next_value = self.value(inputs), self.value(next_inputs)
        advantages = target_q - value
        policy = self.actor_step(t["obs"], actions, advantages, w)
        targets = t["rewards"].float() + t["discounts"].float() * next_value
        critic = critic_loss(*self.critics(inputs, actions), targets, w)
        critic_norm = torch.zeros((), device=self.device)
        if bool(torch.isfinite(critic.loss)):
            critic_norm = self.step_into(self.critics.optimizer, critic.loss, self.critics.params)
        else:
            self.skipped_steps += 1
        self.critics.soft_update(self.algo.target_tau)
        self.train_steps += 1
        self.samples_trained += len(w)
        metrics = {"loss": critic.loss.detach(), "value_loss": value_loss.detach(), "policy_loss": policy,
                   "v_mean": value.mean(), "q_mean": target_q.mean(), "advantage_mean": advantages.mean(),
                   "td_abs_mean": critic.td_errors.abs().mean(), "grad_norm": critic_norm,
                   "importance_weight_mean": w.mean()}
        return metrics, critic.td_errors

    def actor_step(self, obs: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor, w: torch.Tensor
                   ) -> torch.Tensor:
        """One advantage-weighted regression step of the actor on the dataset's ``actions`` (skipped, and counted,
        where its loss is not finite); -> the loss, detached."""
        features, _, mask = self.model.head_inputs(obs, with_value=False)  # the value head is not IQL's
        log_prob = self.model.actor(features, mask).log_prob(actions)
        weights = awr_weights(advantages, self.algo.iql_temperature, self.algo.iql_max_weight)
        policy = awr_actor_loss(log_prob, weights, w)
        if bool(torch.isfinite(policy)):
            self.step_into(self.optimizer, policy, self.actor_params)  # gradients reach only the actor's parameters
        else:
            self.skipped_steps += 1
        return policy.detach()

    # ---- checkpoints ----

    def own_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), **self.critics.state(), "value": self.value.state_dict(),
                "optimizer": self.optimizer.state_dict(), "value_optimizer": self.value_optimizer.state_dict(),
                "returns": None}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.critics.load(state)
        self.value.load_state_dict(state["value"])
        load_moments(self.optimizer, state["optimizer"])
        own_learning_rate(self.optimizer, self.algo.actor_learning_rate, self.hp["learning_rate"])  # the run's own
        load_moments(self.value_optimizer, state["value_optimizer"])

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from the published actor alone (a learner lost before its first checkpoint): the critics and V
        start afresh (they were never published)."""
        self.load_model_weights(weights)
