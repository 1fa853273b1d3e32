"""One APPO training step on a batch of trajectories: pure torch, no Dask (the learner component wraps it).

Per step: update observation statistics, evaluate the current policy on the batch, compute V-trace (or GAE)
targets with the behaviour log-probs recorded at sampling time, mask samples older than ``max_policy_lag``,
then ``num_epochs`` passes of minibatch SGD on the APPO loss with gradient-norm clipping. A step whose loss or
gradients are not finite is skipped and counted, never applied. A recurrent model (``--rnn``) evaluates and trains
on whole sequences instead of shuffled steps (:mod:`daskrl.algo.recurrent`); the feed-forward path is untouched.

With a data-parallel learner group (:mod:`daskrl.learning.learner_group`) each member trains on its share of the
batch and every decision and statistic that spans the batch (finite inputs, normalizer moments, each minibatch's
valid count and advantage moments, the gradients) is summed over the group first, so the members apply the update
one learner would apply on the whole batch. Tensors live on ``device``; a batch reaches it in one pinned copy per
array.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from daskrl.algo import hyperparams
from daskrl.algo.advantages import gae, vtrace
from daskrl.algo.appo_loss import appo_loss, policy_lag_mask
from daskrl.algo.collectives import Collectives, SoloGroup
from daskrl.algo.normalizers import ReturnNormalizer, RunningMeanStd
from daskrl.algo.recurrent import SequenceBatch

if TYPE_CHECKING:
    from daskrl.config import LearnerConfig
    from daskrl.models.actor_critic import ActorCritic


@dataclass
class TrajectoryBatch:
    """Time-major training data from ``N`` env streams of ``T`` steps (numpy arrays)."""

    obs: np.ndarray  # [T + 1, N, *obs_shape]
    actions: np.ndarray  # [T, N, *action_shape]
    rewards: np.ndarray  # [T, N]
    dones: np.ndarray  # [T, N] episode ended after step t
    log_probs: np.ndarray  # [T, N] behaviour policy
    policy_version: np.ndarray  # [T, N]
    # episodes cut by a time limit: their real final observations [M, *obs_shape], and where each one's step is in
    # the flattened [T * N] batch (its `dones` entry is set; its `obs` at t + 1 is the next episode's first)
    final_obs: np.ndarray | None = None
    final_index: np.ndarray | None = None
    # a recurrent policy's state entering step 0 of each column [N, S] (see daskrl/algo/recurrent.py)
    rnn_states: np.ndarray | None = None
    # [T, N] bool: the steps this policy took (several policies share slots; an agent may sit steps out); None: all
    valid: np.ndarray | None = None

    @property
    def num_samples(self) -> int:
        return int(self.rewards.size)


class APPOTrainer:
    """Owns the optimizer and normalizers of one policy; ``train(batch, version)`` -> metrics."""

    def __init__(self, model: ActorCritic, cfg: LearnerConfig, total_env_steps: int,
                 device: torch.device | None = None) -> None:
        """``total_env_steps`` is the run's budget (0: none), the length of a linear learning-rate schedule.
        ``model`` is moved to ``device`` (default: the CPU)."""
        self.device = device if device is not None else torch.device("cpu")
        self.model = model.to(self.device)
        #: the learner group this trainer belongs to (the learner swaps it when the group is formed again)
        self.group: Collectives = SoloGroup()
        self.cfg = cfg
        #: this policy's current learning rate, entropy coefficient, clip ratio and gamma (daskrl/algo/hyperparams.py):
        #: read from here, not from ``cfg``, which only gives their starting values
        self.hp = hyperparams.from_config(cfg)
        self.total_env_steps = total_env_steps
        # foreach: one multi-tensor update instead of a Python loop over parameters; on CPU torch defaults to the
        # loop, and the small CartPole learner step is faster this way (same arithmetic, same state dict)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=self.hp["learning_rate"], eps=1e-5, foreach=True)
        self.obs_rms = RunningMeanStd(model.obs_norm_shape) if model.normalize_obs else None
        self.returns = ReturnNormalizer() if cfg.normalize_returns else None
        self.train_steps = 0
        self.skipped_steps = 0
        self.samples_trained = 0

    def hyperparams(self) -> dict[str, float]:
        """This policy's current mutable hyperparameters (a copy)."""
        return dict(self.hp)

    def set_hyperparams(self, values: dict[str, float]) -> None:
        """Train with these values from the next step on (any subset of :data:`hyperparams.MUTABLE`; all are
        checked before any is set)."""
        self.hp.update(hyperparams.checked(values))

    def learning_rate(self, env_steps: int) -> float:
        lr = self.hp["learning_rate"]
        if self.cfg.lr_schedule == "linear" and self.total_env_steps > 0:
            lr *= max(0.05, 1.0 - env_steps / self.total_env_steps)
        return lr

    def train(self, batch: TrajectoryBatch, current_version: int, env_steps: int = 0,
              on_progress: Callable[[], None] | None = None) -> dict[str, float]:
        """One training step on ``batch``; ``on_progress`` is called after every minibatch (a heartbeat)."""
        cfg, model = self.cfg, self.model
        T, N = batch.rewards.shape
        if not self._group_all(_finite_inputs(batch)):
            # Checked before anything is updated: a NaN/inf would otherwise enter the running observation and
            # return statistics and make every later step non-finite (and skipped) too.
            return self._skip_step(batch, current_version, env_steps)
        obs_np = batch.obs
        mine = None if batch.valid is None else batch.valid.reshape(-1)  # this policy's steps (None: all)
        if self.obs_rms is not None:
            seen = obs_np[:-1].reshape(T * N, *obs_np.shape[2:])
            self._update_stats(self.obs_rms, model.obs_for_stats(seen if mine is None else seen[mine]))
            model.set_obs_stats(self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count)
        obs = self._tensor(obs_np)
        actions = self._tensor(batch.actions).reshape(T * N, *batch.actions.shape[2:])
        rewards = self.shape_rewards(self._tensor(batch.rewards))
        dones = self._tensor(batch.dones).float()
        behaviour = self._tensor(batch.log_probs)
        obs_flat = obs[:-1].reshape(T * N, *obs.shape[2:])
        seq = None  # a recurrent model's sequences: truncated BPTT from the stored states
        if model.recurrent:
            if batch.rnn_states is None:
                raise ValueError("a recurrent model trains on batches with the states of their slots' starts")
            seq = SequenceBatch(model, obs, actions, dones, self._tensor(batch.rnn_states), cfg.recurrence or T)

        with torch.no_grad():
            if seq is None:
                target_lp, _, values = model.evaluate(obs_flat, actions)
                values = values.reshape(T, N)
            else:
                target_lp, values = seq.target_lp, seq.values
            next_values, truncated = self._next_values(batch, obs, values, seq)
            raw_values, raw_next = values, next_values
            if self.returns is not None:
                raw_values, raw_next = self.returns.denormalize(values), self.returns.denormalize(next_values)
            if cfg.advantage == "vtrace":
                targets, advantages = vtrace(behaviour, target_lp.reshape(T, N), rewards, raw_values, raw_next,
                                             dones, self.hp["gamma"], cfg.vtrace_rho, cfg.vtrace_c, truncated=truncated)
            else:
                advantages, targets = gae(rewards, raw_values, raw_next, dones, self.hp["gamma"], cfg.gae_lambda,
                                          truncated=truncated)
            if self.returns is not None:
                flat_targets = targets.reshape(-1)
                self._update_stats(self.returns.stats, flat_targets if mine is None
                                   else flat_targets[torch.as_tensor(mine, device=self.device)])
                targets = self.returns.normalize(targets)
                stats = self.returns.stats
                model.set_return_stats(float(stats.mean), float(stats.var), stats.count)
        versions = self._tensor(batch.policy_version.astype(np.int64))
        valid = policy_lag_mask(versions, current_version, cfg.max_policy_lag).reshape(-1)
        lag = (current_version - versions).float()
        if mine is not None:  # another policy's steps (or nobody's) are no sample of this one
            valid = valid & torch.as_tensor(mine, device=self.device)
            lag = lag.reshape(-1)[torch.as_tensor(mine, device=self.device)]
            lag = lag if lag.numel() else torch.zeros(1, device=self.device)

        flat = {
            "obs": obs_flat, "actions": actions, "old_lp": behaviour.reshape(-1), "adv": advantages.reshape(-1),
            "old_v": values.reshape(-1), "targets": targets.reshape(-1), "valid": valid,
        }
        if seq is not None:
            flat["index"] = torch.arange(T * N, device=self.device)
        lr = self.learning_rate(env_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        total = T * N
        mb = min(cfg.batch_size // self.group.world, total)  # each member's share of a minibatch
        if seq is not None:
            mb = seq.minibatch_samples(mb)
        sums: dict[str, float] = {}
        updates = skipped = 0
        for _ in range(cfg.num_epochs):
            order = torch.randperm(total, device=self.device) if seq is None else seq.order(mb)
            starts = range(0, order.shape[0] - mb + 1, mb)
            moments = self._group_moments(flat, order, starts, mb) if self.group.world > 1 else None
            for i, start in enumerate(starts):
                idx = order[start:start + mb]
                part = {k: v[idx] for k, v in flat.items()}
                valid_count, adv_moments = moments[i] if moments is not None else self._minibatch_moments(part)
                if valid_count == 0:
                    continue  # all too stale: zero gradient, yet an Adam step would still move the weights
                out = self._minibatch(part, valid_count, adv_moments, seq)
                if on_progress is not None:
                    on_progress()
                if out is None:
                    skipped += 1
                    continue
                updates += 1
                for k, v in out.items():
                    sums[k] = sums.get(k, 0.0) + v
        self.train_steps += 1
        self.skipped_steps += skipped
        # the group's samples (each member trained on its share); with several policies, this one's steps
        self.samples_trained += (total if mine is None else int(mine.sum())) * self.group.world
        metrics = {k: v / max(updates, 1) for k, v in sums.items()}
        metrics.update({
            "lr": lr, "updates": updates, "skipped_updates": skipped, "valid_fraction": float(valid.float().mean()),
            "policy_lag_mean": float(lag.mean()), "policy_lag_max": float(lag.max()),
            "value_target_mean": float(targets.mean()),
        })
        return metrics

    def shape_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """``--reward-scale`` then ``--reward-clip`` (the learner trains on these; episode returns stay raw)."""
        if self.cfg.reward_scale != 1.0:
            rewards = rewards * self.cfg.reward_scale
        if self.cfg.reward_clip > 0:
            rewards = rewards.clamp(-self.cfg.reward_clip, self.cfg.reward_clip)
        return rewards

    def _next_values(self, batch: TrajectoryBatch, obs: torch.Tensor, values: torch.Tensor,
                     seq: SequenceBatch | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """V(x_{t+1}) per step [T, N], and where a time limit ended the episode (None when nowhere): there
        V(x_{t+1}) is the value of the episode's real final observation, which the learner bootstraps from
        (``--bootstrap-time-limits``); elsewhere values[t + 1], and for the last step the value of obs[T] (a recurrent
        model's: each from the state after the step before)."""
        T, N = values.shape
        last = self.model.value(obs[-1]) if seq is None else seq.last_value
        next_values = torch.cat([values[1:], last.unsqueeze(0)], dim=0)
        if not self.cfg.bootstrap_time_limits or batch.final_index is None or not batch.final_index.size:
            return next_values, None
        index = self._tensor(batch.final_index)
        final_obs = self._tensor(batch.final_obs)
        finals = (self.model.value(final_obs) if seq is None else seq.final_values(final_obs, index)).to(
            next_values.dtype)
        next_values = next_values.reshape(-1).index_copy(0, index, finals).reshape(T, N)
        truncated = torch.zeros(T * N, dtype=torch.bool, device=self.device).index_fill_(0, index, True).reshape(T, N)
        return next_values, truncated

    def _skip_step(self, batch: TrajectoryBatch, current_version: int, env_steps: int) -> dict[str, float]:
        """Count a step whose inputs are not finite as skipped (every minibatch of it) and change nothing."""
        total = batch.num_samples
        skipped = self.cfg.num_epochs * (total // min(self.cfg.batch_size, total))
        self.train_steps += 1
        self.skipped_steps += skipped
        versions = batch.policy_version.astype(np.int64)
        valid = policy_lag_mask(versions, current_version, self.cfg.max_policy_lag)
        lag = current_version - versions
        return {"lr": self.learning_rate(env_steps), "updates": 0, "skipped_updates": skipped,
                "valid_fraction": float(valid.float().mean()), "policy_lag_mean": float(lag.mean()),
                "policy_lag_max": float(lag.max())}

    def _minibatch_moments(self, mb: dict[str, torch.Tensor]) -> tuple[int, tuple[float, float] | None]:
        """One learner: the minibatch's valid samples, and the (mean, std) its advantages are normalized with
        (None: not normalized)."""
        valid = mb["valid"]
        count = int(valid.sum())
        if not self.cfg.normalize_advantages or count <= 1:
            return count, None
        a = mb["adv"][valid]
        return count, (float(a.mean()), float(a.std()))

    def _group_moments(self, flat: dict[str, torch.Tensor], order: torch.Tensor, starts: range, mb: int
                       ) -> list[tuple[int, tuple[float, float] | None]]:
        """A group: what :meth:`_minibatch_moments` gives, for every minibatch of an epoch over the whole group's
        minibatch, in one collective (the epoch's order is known before its first minibatch)."""
        idx = order[:len(starts) * mb].reshape(len(starts), mb)
        valid, adv = flat["valid"][idx], flat["adv"][idx].double()
        masked = torch.where(valid, adv, torch.zeros_like(adv))
        sums = self.group.sum_(torch.stack([valid.sum(1).double(), masked.sum(1), (masked * masked).sum(1)], 1))
        out: list[tuple[int, tuple[float, float] | None]] = []
        for n, total, squares in sums.tolist():
            if not self.cfg.normalize_advantages or n <= 1:
                out.append((int(n), None))
                continue
            mean = total / n
            out.append((int(n), (mean, math.sqrt(max(squares - n * mean * mean, 0.0) / (n - 1)))))  # as torch.std
        return out

    def _minibatch(self, mb: dict[str, torch.Tensor], valid_count: int, adv_moments: tuple[float, float] | None,
                   seq: SequenceBatch | None = None) -> dict[str, float] | None:
        cfg = self.cfg
        new_lp, entropy, new_v = self.model.evaluate(mb["obs"], mb["actions"]) if seq is None else seq.evaluate(mb)
        adv = mb["adv"]
        if adv_moments is not None:
            adv = (adv - adv_moments[0]) / (adv_moments[1] + 1e-8)
        out = appo_loss(new_lp, mb["old_lp"], adv, new_v, mb["old_v"], mb["targets"], entropy, mb["valid"],
                        clip_ratio=self.hp["clip_ratio"], value_clip=cfg.value_clip or math.inf,
                        entropy_coef=self.hp["entropy_coef"], value_coef=cfg.value_coef)
        finite = bool(torch.isfinite(out.total))
        if self.group.world == 1 and not finite:
            return None
        self.optimizer.zero_grad(set_to_none=True)
        if finite:
            # this member's samples' share of the group's mean over valid samples; the summed gradients are then the
            # gradient of the mean over the whole minibatch
            local = int(mb["valid"].sum())
            (out.total * (max(local, 1) / valid_count) if self.group.world > 1 else out.total).backward()
        if self.group.world > 1 and not self._sum_gradients(finite):
            self.optimizer.zero_grad(set_to_none=True)
            return None
        max_norm = cfg.max_grad_norm
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm if max_norm > 0 else math.inf)
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.optimizer.step()
        return {"loss": out.total.item(), "policy_loss": out.policy_loss, "value_loss": out.value_loss,
                "entropy": out.entropy, "approx_kl": out.approx_kl, "clip_fraction": out.clip_fraction,
                "grad_norm": grad_norm.item()}

    # ---- the group and the device ----

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` on the trainer's device: no copy on the CPU, one pinned copy to a GPU."""
        tensor = torch.from_numpy(array)
        if self.device.type == "cpu":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _group_all(self, flag: bool) -> bool:
        """True when ``flag`` holds on every member (a step is skipped by all or by none)."""
        if self.group.world == 1:
            return flag
        return float(self.group.sum_(torch.tensor([0.0 if flag else 1.0], device=self.device))) == 0.0

    def _update_stats(self, stats: RunningMeanStd, x: np.ndarray | torch.Tensor) -> None:
        """Update running statistics with this step's samples, over the whole group's batch."""
        if self.group.world == 1:
            stats.update(x)
            return
        values = torch.as_tensor(x, device=self.device).double().reshape(x.shape[0], -1)
        sums = self.group.sum_(torch.cat([torch.tensor([float(values.shape[0])], device=self.device, dtype=torch.float64),
                                          values.sum(0), (values * values).sum(0)]))
        n = float(sums[0])
        if n <= 0:
            return
        width = values.shape[1]
        mean = (sums[1:1 + width] / n).cpu().numpy()
        var = np.maximum((sums[1 + width:] / n).cpu().numpy() - mean * mean, 0.0)  # population variance
        stats.update_from_moments(mean.reshape(stats.shape), var.reshape(stats.shape), n)

    def _sum_gradients(self, finite: bool) -> bool:
        """Sum every member's gradients (one collective); False when any member's loss was not finite."""
        params = list(self.model.parameters())
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
                         + [torch.tensor([0.0 if finite else 1.0], device=self.device)])
        self.group.sum_(flat)
        if float(flat[-1]) != 0.0:
            return False
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n
        return True

    # ---- checkpoints ----

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_rms": self.obs_rms.state_dict() if self.obs_rms else None,
            "returns": self.returns.state_dict() if self.returns else None,
            "train_steps": self.train_steps, "samples_trained": self.samples_trained,
            "hyperparams": dict(self.hp), "hyperparams_config": hyperparams.from_config(self.cfg),
        }

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from a model's weights alone (published ones: no optimizer state). The normalizers go on from
        the statistics that travel in the weights' buffers; Adam starts afresh."""
        try:
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
        except RuntimeError as exc:  # shapes that do not fit: one line, not torch's list of every tensor
            raise ValueError(f"these weights do not fit this run's network ({str(exc).splitlines()[-1].strip()})") \
                from exc
        if unexpected or set(missing) - {"obs_count", "return_stats"}:  # statistics older checkpoints lack are fine
            raise ValueError(f"these weights do not fit this run's network (missing {sorted(missing)}, unexpected "
                             f"{sorted(unexpected)})")
        if self.obs_rms is not None:
            self.obs_rms.load_state_dict({"shape": list(self.obs_rms.shape), "mean": self.model.obs_mean.tolist(),
                                          "var": self.model.obs_var.tolist(), "count": float(self.model.obs_count)})
        if self.returns is not None:
            mean, var, count = self.model.return_stats.tolist()
            self.returns.load_state_dict({"shape": [], "mean": mean, "var": var, "count": count})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        hp = hyperparams.resumed(state, self.cfg)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.obs_rms is not None and state.get("obs_rms"):
            self.obs_rms.load_state_dict(state["obs_rms"])
            self.model.set_obs_stats(self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count)
        if self.returns is not None and state.get("returns"):
            self.returns.load_state_dict(state["returns"])
            stats = self.returns.stats
            self.model.set_return_stats(float(stats.mean), float(stats.var), stats.count)
        self.train_steps = state.get("train_steps", 0)
        self.samples_trained = state.get("samples_trained", 0)
        self.hp = hp


def _finite_inputs(batch: TrajectoryBatch) -> bool:
    arrays = [batch.obs, batch.rewards, batch.log_probs] + ([batch.final_obs] if batch.final_obs is not None else []) \
        + ([batch.rnn_states] if batch.rnn_states is not None else [])
    return all(np.isfinite(a).all() for a in arrays)
