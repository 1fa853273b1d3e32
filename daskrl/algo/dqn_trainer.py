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

from daskrl.algo.dqn_loss import dqn_loss, dqn_targets, dueling
from daskrl.algo.policy_trainer import PolicyTrainer
from daskrl.algo.replay_steps import StepMetrics, finite_rows, grad_norm, skipped_metrics

if TYPE_CHECKING:
    from daskrl.config import AlgoConfig, LearnerConfig
    from daskrl.models.actor_critic import ActorCritic


def q_values(net: ActorCritic, obs: torch.Tensor, use_dueling: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, A] Q-values of ``obs`` (a feed-forward model), and the action mask of Dict observations (or None)."""
    policy, value, mask = net.head_inputs(obs, with_value=use_dueling)
    advantages = net.actor.logits(policy)
    if not use_dueling:
        return advantages, mask
    return dueling(net.critic(value), advantages), mask


class DQNTrainer(PolicyTrainer):
    """Owns the online and target networks and the optimizer of one policy (the rest: :class:`PolicyTrainer`)."""

    def __init__(self, model: ActorCritic, cfg: LearnerConfig, algo: AlgoConfig, device: torch.device | None = None
                 ) -> None:
        super().__init__(model, cfg, device)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        self.algo = algo
        self.optimizer = torch.optim.Adam(model.parameters(), lr=self.hp["learning_rate"], foreach=True)
        self.params = list(model.parameters())  # (loading a checkpoint copies into these: the list stays right)

    def train(self, batch: dict[str, np.ndarray], weights: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
        """One update on a minibatch (the fields of :data:`daskrl.replay.store.FIELDS`) with importance ``weights``;
        returns the metrics and the TD errors (the transitions' new priorities). A minibatch whose loss or
        gradients are not finite is skipped: its TD errors are then all zero."""
        metrics, td_errors, _ = self.train_many({k: v[None] for k, v in batch.items()}, np.asarray(weights)[None])
        return metrics, td_errors[0]

    def train_many(self, batches: dict[str, np.ndarray], weights: np.ndarray
                   ) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
        """One update per minibatch, in order: ``batches`` holds K minibatches ([K, B, ...] per field), ``weights``
        [K, B]. Returns the metrics (means over the updates made), the TD errors [K, B] (zero for a skipped
        minibatch) and which minibatches updated [K]. The metrics stay tensors until the last update."""
        self.step_hp = dict(self.hp)
        for group in self.optimizer.param_groups:
            group["lr"] = self.step_hp["learning_rate"]
        count, size = weights.shape
        finite = finite_rows(batches, ("obs", "rewards", "next_obs"))
        t = {k: torch.as_tensor(v, device=self.device) for k, v in batches.items()}
        w = torch.as_tensor(weights, device=self.device)
        td = torch.zeros(count, size, device=self.device)  # filled on the device, read back once
        applied, steps = np.zeros(count, bool), StepMetrics()
        for k in np.flatnonzero(finite).tolist():
            if self.obs_rms is not None:
                self._follow_obs(batches["obs"][k])
            done = self._update({name: value[k] for name, value in t.items()}, w[k])
            if done is not None:
                steps.add(done[0])
                td[k], applied[k] = done[1], True
        made = int(applied.sum())
        self.skipped_steps += count - made
        if not made:
            return skipped_metrics(count), td.cpu().numpy(), applied
        metrics = {**steps.means(), "lr": self.step_hp["learning_rate"], "updates": made,
                   "skipped_updates": count - made}
        return metrics, td.cpu().numpy(), applied

    def _follow_obs(self, obs: np.ndarray) -> None:
        """Observation statistics follow the observations about to be trained on (both networks normalize so)."""
        self.obs_rms.update(self.model.obs_for_stats(obs))
        for net in (self.model, self.target):
            net.set_obs_stats(self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count)

    def _update(self, t: dict[str, torch.Tensor], weights: torch.Tensor
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
        self.optimizer.step()
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
        self.optimizer.load_state_dict(state["optimizer"])

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from published weights alone (a learner lost before its first checkpoint): the target network
        starts as a copy, Adam afresh, the observation statistics from the weights' buffers."""
        self.model.load_state_dict(weights, strict=False)
        self.target.load_state_dict(self.model.state_dict())
        self.obs_stats_from_model()
