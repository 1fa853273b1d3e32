"""One CQL update on a minibatch of a dataset preloaded in the replay shards (Kumar et al. 2020, continuous actions):
SAC's update with a conservative critic. Pure torch, no Dask (the off-policy learner wraps it).

Everything but the critics' objective is :class:`~daskrl.algo.sac.trainer.SACTrainer`'s: SAC's actor (``--action-bounds
squash --gaussian-std state``), the twin critics and their soft target, the tuned temperature keeping the entropy
near ``-action_dim``. The critics' objective follows the official code's gym MuJoCo setting: the backup has no
entropy term (``r + discount * min Q_target(s', a')``, ``a' ~ pi(.|s')``), and each critic adds ``--cql-weight``
times the conservative penalty (:mod:`daskrl.algo.cql.loss`) over ``--cql-actions`` uniform actions and as many of
the policy's at s and at s', with no Lagrange tuning. The actor and the temperature step at
``--actor-learning-rate`` (the paper's 1e-4), the critics at ``--learning-rate``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.common.replay_steps import own_learning_rate
from daskrl.algo.cql.loss import conservative_penalty
from daskrl.algo.sac.loss import CriticLoss, critic_loss, sac_targets
from daskrl.algo.sac.trainer import SACTrainer, squashed_sample
from daskrl.models.inputs.observations import EncoderInput

if TYPE_CHECKING:
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.models.actor_critic import ActorCritic


def repeat_rows(inputs: EncoderInput, count: int) -> EncoderInput:
    """Each row of ``inputs`` (a tensor, or a Dict observation's tensors) ``count`` times in a row."""
    if isinstance(inputs, dict):
        return {key: value.repeat_interleave(count, 0) for key, value in inputs.items()}
    return inputs.repeat_interleave(count, 0)


class CQLTrainer(SACTrainer):
    """SAC's trainer with CQL's critic objective and the actor's own learning rate."""

    def __init__(self, model: ActorCritic, model_cfg: ModelConfig, cfg: LearnerConfig, algo: AlgoConfig,
                 device: torch.device | None = None) -> None:
        if model.spaces.action_kind != "box" or not model.spaces.box_is_bounded():
            raise ValueError("CQL's actor is SAC's squashed Gaussian and its penalty draws uniform actions: it needs "
                             "Box actions with finite bounds")
        super().__init__(model, model_cfg, cfg, algo, device)
        low, high = (torch.as_tensor(bound, dtype=torch.float32, device=self.device)
                     for bound in (model.spaces.low, model.spaces.high))
        self.box_low, self.box_width = low, high - low
        self.uniform_log_density = -torch.log(self.box_width).sum()
        self.keep_actor_rate()

    def keep_actor_rate(self) -> None:
        """The actor and the temperature at --actor-learning-rate (the official code steps alpha at the policy's)."""
        for optimizer in (self.optimizer, self.alpha_optimizer):
            own_learning_rate(optimizer, self.algo.actor_learning_rate, self.hp["learning_rate"])

    def critic_objective(self, t: dict[str, torch.Tensor], w: torch.Tensor, inputs: EncoderInput,
                         alpha: torch.Tensor) -> tuple[CriticLoss, dict[str, torch.Tensor]]:
        """The critics' squared errors on the backup without entropy, plus the weighted conservative penalties (at
        half the weight, as SAC's critic loss halves the squared errors: the official code's ratio of the two)."""
        with torch.no_grad():
            next_actions, _ = squashed_sample(self.model, t["next_obs"])
            tq1, tq2 = self.critics.target(self.model.prepare(t["next_obs"])[0], next_actions)
            targets = sac_targets(t["rewards"].float(), t["discounts"].float(), tq1, tq2, torch.zeros_like(tq1), 0.0)
        q1, q2 = self.critics(inputs, t["actions"])
        fitted = critic_loss(q1, q2, targets, w)
        actions, log_density = self.sampled_actions(t["obs"], t["next_obs"])
        count = log_density.shape[1]
        sampled = [q.reshape(len(w), count) for q in self.critics(repeat_rows(inputs, count), actions)]
        penalty = sum(conservative_penalty(s, log_density, q, w) for s, q in zip(sampled, (q1, q2), strict=True))
        loss = fitted.loss + 0.5 * self.algo.cql_weight * penalty
        metrics = {"conservative_penalty": penalty.detach() / 2, "q_data_mean": q1.detach().mean(),
                   "q_sampled_mean": sampled[0].detach().mean()}
        return CriticLoss(loss, fitted.td_errors, fitted.targets), metrics

    @torch.no_grad()
    def sampled_actions(self, obs: torch.Tensor, next_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The penalty's actions per state, ``--cql-actions`` of each kind: uniform in the box, the policy's at s,
        the policy's at s'; -> actions [B * 3N, action_dim] (state by state) and their log densities [B, 3N]."""
        count, rows = self.algo.cql_actions, len(obs)
        uniform = self.box_low + torch.rand(rows, count, len(self.box_width), device=self.device) * self.box_width
        drawn = [uniform]
        log_density = [self.uniform_log_density.expand(rows, count)]
        for states in (obs, next_obs):
            actions, log_prob = squashed_sample(self.model, states.repeat_interleave(count, 0))
            drawn.append(actions.reshape(rows, count, -1))
            log_density.append(log_prob.reshape(rows, count))
        return torch.cat(drawn, 1).reshape(rows * 3 * count, -1), torch.cat(log_density, 1)

    def load_own_state(self, state: dict[str, Any]) -> None:
        super().load_own_state(state)
        self.keep_actor_rate()  # this run's --actor-learning-rate, not the one the checkpoint was saved with
