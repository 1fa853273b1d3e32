"""One SAC update on a replay minibatch: pure torch, no Dask (the off-policy learner component wraps it).

The actor is the run's :class:`~daskrl.models.actor_critic.ActorCritic` with a squashed Gaussian head whose log-std
depends on the state (``--algo sac`` sets ``--action-bounds squash --gaussian-std state``), so samplers, the
parameter store, checkpoints and ``enjoy`` use it as they use APPO's; its value head is not trained. The twin critics
(:class:`~daskrl.models.q_critics.TwinQ`) and their targets live here only. Per minibatch: the critics regress on
soft n-step targets, the actor follows the smaller critic's value minus ``alpha log pi``, ``log alpha`` keeps the
entropy near ``-action_dim``, and the target critics move by ``--target-tau`` (:mod:`daskrl.algo.sac_loss`).
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from daskrl.algo.policy_trainer import PolicyTrainer
from daskrl.algo.sac_loss import actor_loss, alpha_loss, critic_loss, sac_targets, soft_update
from daskrl.models.q_critics import TwinQ

if TYPE_CHECKING:
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


class SACTrainer(PolicyTrainer):
    """Owns the twin critics and their targets, the temperature and the optimizers of one policy (the actor is the
    model; the rest: :class:`PolicyTrainer`)."""

    def __init__(self, model: ActorCritic, model_cfg: ModelConfig, cfg: LearnerConfig, algo: AlgoConfig,
                 device: torch.device | None = None) -> None:
        """``model_cfg``: the options the actor was built with; the critics' encoders are built the same way."""
        super().__init__(model, cfg, device)
        self.critics = TwinQ(model.spaces, model_cfg).to(self.device)
        self.target = copy.deepcopy(self.critics).requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(algo.init_alpha), device=self.device, requires_grad=True)
        self.target_entropy = -float(model.spaces.action_dim)
        self.algo = algo
        lr = self.hp["learning_rate"]
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)  # the actor's: "optimizer" in checkpoints
        self.critic_optimizer = torch.optim.Adam(self.critics.parameters(), lr=lr)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=lr)

    def train(self, batch: dict[str, np.ndarray], weights: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
        """One update of critics, actor and temperature on a minibatch with importance ``weights``; returns the
        metrics and the TD errors (new priorities). A non-finite minibatch or loss is skipped (TD errors zero)."""
        self.step_hp = dict(self.hp)
        if not all(np.isfinite(batch[k]).all() for k in ("obs", "rewards", "next_obs", "actions")):
            return self._skipped(len(weights))
        if self.obs_rms is not None:
            self.obs_rms.update(self.model.obs_for_stats(batch["obs"]))
            self.model.set_obs_stats(self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count)
        t = {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}
        w = torch.as_tensor(weights, device=self.device)
        for opt in (self.optimizer, self.critic_optimizer, self.alpha_optimizer):
            for group in opt.param_groups:
                group["lr"] = self.step_hp["learning_rate"]
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_actions, next_log_prob = squashed_sample(self.model, t["next_obs"])
            tq1, tq2 = self.target(self.model.prepare(t["next_obs"])[0], next_actions)
            targets = sac_targets(t["rewards"].float(), t["discounts"].float(), tq1, tq2, next_log_prob, alpha)
        inputs = self.model.prepare(t["obs"])[0]
        critic = critic_loss(*self.critics(inputs, t["actions"]), targets, w)
        if not torch.isfinite(critic.loss):
            return self._skipped(len(weights))
        grad_norm = self._step(self.critic_optimizer, critic.loss)
        # the actor and the temperature follow the critics just updated (as SB3 and the paper's code order them)
        actions, log_prob = squashed_sample(self.model, t["obs"])
        q1_pi, q2_pi = self.critics(inputs, actions)
        policy = actor_loss(q1_pi, q2_pi, log_prob, alpha)
        temperature = alpha_loss(self.log_alpha, log_prob, self.target_entropy)
        if torch.isfinite(policy) and torch.isfinite(temperature):
            self._step(self.optimizer, policy)  # gradients reach only the actor's parameters (backward inputs)
            self._step(self.alpha_optimizer, temperature)
        else:
            self.skipped_steps += 1
        soft_update(self.target, self.critics, self.algo.target_tau)
        self.train_steps += 1
        self.samples_trained += len(weights)
        metrics = {"loss": critic.loss.item(), "policy_loss": policy.item(), "alpha": float(alpha),
                   "entropy": -float(log_prob.detach().mean()), "q_mean": float(q1_pi.detach().mean()),
                   "td_abs_mean": float(critic.td_errors.abs().mean()), "grad_norm": grad_norm,
                   "lr": self.step_hp["learning_rate"], "updates": 1, "skipped_updates": 0,
                   "importance_weight_mean": float(np.mean(weights))}
        return metrics, critic.td_errors.cpu().numpy()

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> float:
        """Backward into ``optimizer``'s parameters only, clip (``--max-grad-norm``, 0: no clipping), step; returns
        the gradient norm."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=params)
        max_norm = self.cfg.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else math.inf)
        optimizer.step()
        return float(norm)

    def _skipped(self, n: int) -> tuple[dict[str, float], np.ndarray]:
        self.skipped_steps += 1
        return {"updates": 0, "skipped_updates": 1}, np.zeros(n)

    # ---- checkpoints ----

    def own_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "critics": self.critics.state_dict(),
                "target_critics": self.target.state_dict(), "log_alpha": self.log_alpha.item(),
                "optimizer": self.optimizer.state_dict(), "critic_optimizer": self.critic_optimizer.state_dict(),
                "alpha_optimizer": self.alpha_optimizer.state_dict(), "returns": None}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.critics.load_state_dict(state["critics"])
        self.target.load_state_dict(state["target_critics"])
        with torch.no_grad():
            self.log_alpha.fill_(state["log_alpha"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from the published actor alone (a learner lost before its first checkpoint): the critics start
        afresh (they were never published), the observation statistics from the weights' buffers."""
        self.model.load_state_dict(weights, strict=False)
        self.obs_stats_from_model()

