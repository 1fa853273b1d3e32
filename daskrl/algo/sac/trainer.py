"""One SAC update on a replay minibatch: pure torch, no Dask (the off-policy learner component wraps it).

The actor is the run's :class:`~daskrl.models.actor_critic.ActorCritic` with a squashed Gaussian head whose log-std
depends on the state (``--algo sac`` sets ``--action-bounds squash --gaussian-std state``), so samplers, the
parameter store, checkpoints and ``enjoy`` use it as they use APPO's; its value head is not trained. The twin critics
(:class:`~daskrl.models.q_critics.TwinQ`) and their targets live here only. Per minibatch: the critics regress on
soft n-step targets, the actor follows the smaller critic's value minus ``alpha log pi``, ``log alpha`` keeps the
entropy near ``-action_dim``, and the target critics move by ``--target-tau`` (:mod:`daskrl.algo.sac.loss`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from daskrl.algo.common.optimizers import load_moments
from daskrl.algo.common.replay_steps import ReplayTrainer
from daskrl.algo.sac.critics import TargetedCritics
from daskrl.algo.sac.loss import CriticLoss, actor_loss, alpha_loss, critic_loss, sac_targets

if TYPE_CHECKING:
    from daskrl.algo.common.policy_trainer import TrainerOptions
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.models.actor_critic import ActorCritic

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def squashed_sample(actor: ActorCritic, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterized action of the actor's squashed Gaussian for ``obs``, and its log-probability, computed from
    the pre-squash sample (stable where tanh saturates: log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)))."""
    features, _, mask = actor.head_inputs(obs, with_value=False)  # the value head is not SAC's
    dist = actor.actor(features, mask)
    u = dist.mean + dist.log_std.exp() * torch.randn_like(dist.mean)
    gaussian = (-0.5 * ((u - dist.mean) * torch.exp(-dist.log_std)).square() - dist.log_std - _HALF_LOG_2PI).sum(-1)
    log_jacobian = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1) + torch.log(dist.half).sum(-1)
    return dist.center + torch.tanh(u) * dist.half, gaussian - log_jacobian


class SACTrainer(ReplayTrainer):
    """Owns the twin critics and their targets, the temperature and the optimizers of one policy (the actor is the
    model; the rest: :class:`ReplayTrainer`)."""

    finite_fields = ("obs", "rewards", "next_obs", "actions")

    @classmethod
    def from_options(cls, model: ActorCritic, options: TrainerOptions, device: torch.device) -> SACTrainer:
        return cls(model, options.model, options.learner, options.algo, device)

    def __init__(self, model: ActorCritic, model_cfg: ModelConfig, cfg: LearnerConfig, algo: AlgoConfig,
                 device: torch.device | None = None) -> None:
        """``model_cfg``: the options the actor was built with; the critics' encoders are built the same way."""
        super().__init__(model, cfg, device)
        self.model_cfg = model_cfg
        self.log_alpha = torch.tensor(math.log(algo.init_alpha), device=self.device, requires_grad=True)
        self.target_entropy = -float(model.spaces.action_dim)
        self.algo = algo
        lr = self.hp["learning_rate"]
        self.optimizer = self.kernels.adam(model.parameters(), lr=lr)  # the actor's: "optimizer" in checkpoints
        self.alpha_optimizer = self.kernels.adam([self.log_alpha], lr=lr)
        # listed once (loading a checkpoint copies into these tensors, so the lists stay right)
        self.actor_params = list(model.parameters())
        self.critics = self._new_critics(joint=None)

    def _new_critics(self, joint: bool | None) -> TargetedCritics:
        """The twin critics (in :class:`~daskrl.models.q_critics.TwinQ`'s ``joint`` layout), their targets and their
        optimizer, all new."""
        return TargetedCritics(self.model.spaces, self.model_cfg, self.kernels.adam, self.hp["learning_rate"],
                               self.device, joint)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer, self.critics.optimizer, self.alpha_optimizer]

    def update(self, t: dict[str, torch.Tensor], w: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """Critics, then actor and temperature, then the target critics, on one minibatch of tensors; its metrics
        (0-d tensors) and TD errors, or None where the critics' loss was not finite (nothing applied)."""
        alpha = self.log_alpha.detach().exp()
        inputs = self.model.prepare(t["obs"])[0]
        critic, critic_metrics = self.critic_objective(t, w, inputs, alpha)
        if not bool(torch.isfinite(critic.loss)):
            return None
        critic_norm = self.step_into(self.critics.optimizer, critic.loss, self.critics.params)
        # the actor and the temperature follow the critics just updated (as SB3 and the paper's code order them)
        policy, log_prob, q_pi = self.actor_step(t["obs"], inputs, alpha)
        self.critics.soft_update(self.algo.target_tau)
        self.train_steps += 1
        self.samples_trained += len(w)
        metrics = {"loss": critic.loss, "policy_loss": policy, "alpha": alpha, "entropy": -log_prob.detach().mean(),
                   "q_mean": q_pi.detach().mean(), "td_abs_mean": critic.td_errors.abs().mean(),
                   "grad_norm": critic_norm, "importance_weight_mean": w.mean(), **critic_metrics}
        return metrics, critic.td_errors

    def critic_objective(self, t: dict[str, torch.Tensor], w: torch.Tensor, inputs: torch.Tensor,
                         alpha: torch.Tensor) -> tuple[CriticLoss, dict[str, torch.Tensor]]:
        """The critics' loss on soft n-step targets, and metrics of its own (none): what CQL extends."""
        with torch.no_grad():
            next_actions, next_log_prob = squashed_sample(self.model, t["next_obs"])
            tq1, tq2 = self.critics.target(self.model.prepare(t["next_obs"])[0], next_actions)
            targets = sac_targets(t["rewards"].float(), t["discounts"].float(), tq1, tq2, next_log_prob, alpha)
        return critic_loss(*self.critics(inputs, t["actions"]), targets, w), {}

    def actor_step(self, obs: torch.Tensor, inputs: torch.Tensor, alpha: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of the actor and the temperature on fresh actions at ``obs`` (skipped, and counted, where a loss
        is not finite); -> the policy's loss, the actions' log-probs and the first critic's values of them."""
        actions, log_prob = squashed_sample(self.model, obs)
        q1_pi, q2_pi = self.critics(inputs, actions)
        policy = actor_loss(q1_pi, q2_pi, log_prob, alpha)
        temperature = alpha_loss(self.log_alpha, log_prob, self.target_entropy)
        if bool(torch.isfinite(policy) & torch.isfinite(temperature)):
            self.step_into(self.optimizer, policy, self.actor_params)  # gradients reach only the actor's parameters
            self.step_into(self.alpha_optimizer, temperature, [self.log_alpha])
        else:
            self.skipped_steps += 1
        return policy, log_prob, q1_pi

    # ---- checkpoints ----

    def own_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), **self.critics.state(), "log_alpha": self.log_alpha.item(),
                "optimizer": self.optimizer.state_dict(), "alpha_optimizer": self.alpha_optimizer.state_dict(),
                "returns": None}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        joint = TargetedCritics.saved_joint(state)
        if joint != self.critics.joint:  # saved before MLP critics read [observation, action] in one MLP
            self.critics = self._new_critics(joint)
        self.critics.load(state)
        with torch.no_grad():
            self.log_alpha.fill_(state["log_alpha"])
        load_moments(self.optimizer, state["optimizer"])
        load_moments(self.alpha_optimizer, state["alpha_optimizer"])

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from the published actor alone (a learner lost before its first checkpoint): the critics start
        afresh (they were never published), the observation statistics from the weights' buffers."""
        self.load_model_weights(weights)

