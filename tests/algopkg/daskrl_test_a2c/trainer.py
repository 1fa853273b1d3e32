"""A2C's update: one gradient step per batch on n-step returns bootstrapped from the batch's last observations,
the policy-gradient loss on their advantages, a value loss and an entropy bonus (no importance correction: the
samples are as old as the asynchronous sampling makes them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from daskrl.algo.common.policy_trainer import PolicyTrainer, TrainerOptions


class A2CTrainer(PolicyTrainer):
    """The optimizer of one policy and its update; the rest (hyperparameters, counters, checkpoints) is
    :class:`PolicyTrainer`'s."""

    @classmethod
    def from_options(cls, model: Any, options: TrainerOptions, device: torch.device) -> A2CTrainer:
        return cls(model, options.learner, device)

    def __init__(self, model: Any, cfg: Any, device: torch.device | None = None) -> None:
        super().__init__(model, cfg, device)
        self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=self.hp["learning_rate"], alpha=0.99,
                                             eps=1e-5)
        self.lag_counts = np.zeros(1, dtype=np.int64)  # samples trained on by policy lag, as the learner reports

    def train(self, batch: Any, current_version: int, env_steps: int = 0,
              on_progress: Callable[[], None] | None = None) -> dict[str, float]:
        self.step_hp = dict(self.hp)
        lag = self._count_lags(current_version - batch.policy_version.reshape(-1))
        if not batch.finite():
            self.train_steps += 1
            self.skipped_steps += 1
            return {"updates": 0, "skipped_updates": 1, "policy_lag_max": float(lag.max(initial=0))}
        steps, envs = batch.rewards.shape
        obs = torch.from_numpy(batch.obs).to(self.device)
        actions = torch.from_numpy(batch.actions).to(self.device).reshape(steps * envs, *batch.actions.shape[2:])
        log_prob, entropy, values = self.model.evaluate(obs[:-1].reshape(steps * envs, *obs.shape[2:]), actions)
        returns = self._returns(obs[-1], torch.from_numpy(batch.rewards).float(),
                                torch.from_numpy(batch.dones).float()).reshape(-1)
        advantages = returns - values.detach()
        policy_loss = -(log_prob * advantages).mean()
        value_loss = 0.5 * (returns - values).pow(2).mean()
        loss = policy_loss + self.cfg.value_coef * value_loss - self.step_hp["entropy_coef"] * entropy.mean()
        for group in self.optimizer.param_groups:
            group["lr"] = self.step_hp["learning_rate"]
        self.optimizer.zero_grad()
        loss.backward()
        if self.cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.train_steps += 1
        self.samples_trained += steps * envs
        return {"loss": loss.item(), "policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
                "entropy": entropy.mean().item(), "updates": 1, "skipped_updates": 0,
                "lr": self.step_hp["learning_rate"], "policy_lag_max": float(lag.max(initial=0))}

    def _count_lags(self, lag: np.ndarray) -> np.ndarray:
        """Add the batch's policy lags (versions behind the learner) to :attr:`lag_counts`; returns them."""
        counts = np.bincount(lag.clip(0).astype(np.int64))
        if len(counts) > len(self.lag_counts):
            self.lag_counts = np.pad(self.lag_counts, (0, len(counts) - len(self.lag_counts)))
        self.lag_counts[:len(counts)] += counts
        return lag

    @torch.no_grad()
    def _returns(self, last_obs: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """n-step discounted returns [T, N], each env's bootstrapped from the value of its last observation."""
        running = self.model.value(last_obs).float().cpu()
        returns = torch.empty_like(rewards)
        for t in reversed(range(rewards.shape[0])):
            running = rewards[t] + self.step_hp["gamma"] * (1.0 - dones[t]) * running
            returns[t] = running
        return returns.to(self.device)

    def own_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        self.load_model_weights(weights)
