"""One TD3 update on a replay minibatch (Fujimoto et al. 2018): pure torch, no Dask (the off-policy learner wraps it).

The actor is the run's :class:`~daskrl.models.actor_critic.ActorCritic` with a squashed Gaussian head whose log-std is
one parameter the actor's loss never moves (``--algo td3`` sets ``--action-bounds squash --gaussian-std parameter``
and, where the user gave none, ``--init-log-std`` for the exploration noise), so its mode is TD3's deterministic
policy and its samples are that action with Gaussian noise, which is how the rollout workers explore. Per minibatch:
the twin critics (:class:`~daskrl.models.q_critics.TwinQ`) regress on n-step targets from the smaller target critic
at the target actor's action plus clipped noise (target policy smoothing); every ``--policy-delay`` updates the actor
climbs the first critic, and the target actor and critics move by ``--target-tau``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.common.optimizers import load_moments
from daskrl.algo.common.replay_steps import ReplayTrainer
from daskrl.algo.sac.critics import TargetedCritics
from daskrl.algo.sac.loss import SoftUpdate, critic_loss

if TYPE_CHECKING:
    from daskrl.algo.common.policy_trainer import TrainerOptions
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.models.actor_critic import ActorCritic


def deterministic_action(actor: ActorCritic, obs: torch.Tensor) -> torch.Tensor:
    """The actor's action for ``obs`` without noise: its squashed Gaussian's mode, in the env's units."""
    features, _, mask = actor.head_inputs(obs, with_value=False)
    return actor.actor(features, mask).mode()


def smoothed_target_action(target_actor: ActorCritic, obs: torch.Tensor, noise: float, clip: float) -> torch.Tensor:
    """The target actor's action plus Gaussian noise of std ``noise`` clipped to +-``clip`` (both in half-widths of
    the action box, as the paper's are in units of the largest action), kept in the box: a critic target that is
    smooth in the action, so the actor cannot exploit a narrow peak of the critic."""
    features, _, mask = target_actor.head_inputs(obs, with_value=False)
    dist = target_actor.actor(features, mask)
    mode = dist.mode()
    jitter = (torch.randn_like(mode) * noise).clamp(-clip, clip) * dist.half
    return torch.maximum(torch.minimum(mode + jitter, dist.center + dist.half), dist.center - dist.half)


class TD3Trainer(ReplayTrainer):
    """Owns the twin critics, the target actor and critics, and the optimizers of one policy (the actor is the model;
    the rest: :class:`ReplayTrainer`)."""

    finite_fields = ("obs", "rewards", "next_obs", "actions")

    @classmethod
    def from_options(cls, model: ActorCritic, options: TrainerOptions, device: torch.device) -> TD3Trainer:
        return cls(model, options.model, options.learner, options.algo, device)

    def __init__(self, model: ActorCritic, model_cfg: ModelConfig, cfg: LearnerConfig, algo: AlgoConfig,
                 device: torch.device | None = None) -> None:
        super().__init__(model, cfg, device)
        self.model_cfg, self.algo = model_cfg, algo
        self.optimizer = self.kernels.adam(model.parameters(), lr=self.hp["learning_rate"])  # the actor's
        self.actor_params = list(model.parameters())
        self.target_actor = copy.deepcopy(model).requires_grad_(False)
        self.actor_soft_update = SoftUpdate(self.target_actor, model)
        self.critics = TargetedCritics(model.spaces, model_cfg, self.kernels.adam, self.hp["learning_rate"],
                                       self.device)
        self.policy_loss = torch.zeros((), device=self.device)  # the last actor update's (reported between them)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer, self.critics.optimizer]

    def update(self, t: dict[str, torch.Tensor], w: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """The critics; every ``policy_delay`` updates the actor and the targets; its metrics (0-d tensors) and TD
        errors, or None where the critics' loss was not finite (nothing applied)."""
        with torch.no_grad():
            next_actions = smoothed_target_action(self.target_actor, t["next_obs"], self.algo.target_policy_noise,
                                                  self.algo.target_noise_clip)
            tq1, tq2 = self.critics.target(self.model.prepare(t["next_obs"])[0], next_actions)
            targets = t["rewards"].float() + t["discounts"].float() * torch.minimum(tq1, tq2)
        inputs = self.model.prepare(t["obs"])[0]
        critic = critic_loss(*self.critics(inputs, t["actions"]), targets, w)
        if not bool(torch.isfinite(critic.loss)):
            return None
        critic_norm = self.step_into(self.critics.optimizer, critic.loss, self.critics.params)
        self.train_steps += 1
        if self.train_steps % self.algo.policy_delay == 0:
            q1, _ = self.critics(inputs, deterministic_action(self.model, t["obs"]))
            policy = -q1.mean()
            if bool(torch.isfinite(policy)):
                self.step_into(self.optimizer, policy, self.actor_params)  # gradients reach only the actor's parameters
                self.policy_loss = policy.detach()
            else:
                self.skipped_steps += 1
            self.actor_soft_update(self.algo.target_tau)
            self.critics.soft_update(self.algo.target_tau)
        self.samples_trained += len(w)
        metrics = {"loss": critic.loss, "policy_loss": self.policy_loss, "q_mean": targets.mean(),
                   "td_abs_mean": critic.td_errors.abs().mean(), "grad_norm": critic_norm,
                   "importance_weight_mean": w.mean()}
        return metrics, critic.td_errors


    # ---- checkpoints ----

    def own_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "target_actor": self.target_actor.state_dict(),
                **self.critics.state(), "optimizer": self.optimizer.state_dict(), "returns": None}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.target_actor.load_state_dict(state["target_actor"])
        self.critics.load(state)
        load_moments(self.optimizer, state["optimizer"])

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from the published actor alone (a learner lost before its first checkpoint): the target actor
        starts from it, the critics afresh (they were never published)."""
        self.load_model_weights(weights)
        self.target_actor.load_state_dict(self.model.state_dict())
