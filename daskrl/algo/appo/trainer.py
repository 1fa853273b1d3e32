"""One APPO training step on a batch of trajectories: pure torch, no Dask (the learner component wraps it).

Per step: update observation statistics, evaluate the current policy on the batch, compute V-trace (or GAE) targets
with the behaviour log-probs recorded at sampling time, mask samples older than ``max_policy_lag``, then
``num_epochs`` passes of minibatch SGD on the APPO loss with gradient-norm clipping (with targets per minibatch, each
minibatch computes its own from the pass its loss makes instead). A step whose loss or gradients are not finite is
skipped and counted, never applied.

What varies is chosen once, not tested per step: the batch's layout (:mod:`daskrl.algo.appo.flat_batch`: shuffled steps
for a feed-forward model, whole sequences for a recurrent core, :mod:`daskrl.algo.appo.recurrent`; whole trajectories
whose targets each minibatch computes from its own pass, :mod:`daskrl.algo.appo.trajectory_minibatches`), chosen with the
model and ``--targets-from``; which steps are this policy's (the batch's ``valid`` mask, all True with one policy);
and the learners it trains with (:mod:`daskrl.algo.common.collectives`). Every decision and statistic that spans the batch
(finite inputs, normalizer moments, each minibatch's valid count and advantage moments, the gradients) goes through
the group's sums: the identity for one learner, and with a data-parallel learner group
(:mod:`daskrl.learning.group.learner_group`), where each member trains on its share of the batch, the members apply the
update one learner would apply on the whole batch. Tensors live on ``device``; a batch reaches it in one pinned copy
per array.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from daskrl.algo.appo.advantages import gae, vtrace
from daskrl.algo.appo.flat_batch import BatchLayout, FlatBatch, gathered_ahead
from daskrl.algo.appo.loss import LossOutput, appo_loss, policy_lag_mask
from daskrl.algo.appo.minibatch_counts import MinibatchCounts, epoch_counts, normalized, normalized_with
from daskrl.algo.appo.policy_lag import lag_percentile
from daskrl.algo.appo.recurrent import SequenceBatch
from daskrl.algo.appo.trajectory_batch import TrajectoryBatch
from daskrl.algo.appo.trajectory_minibatches import TrajectoryMinibatches, targets_from
from daskrl.algo.common.collectives import all_members, update_over_group
from daskrl.algo.common.lr_schedule import kl_adapted_lr, scheduled_lr
from daskrl.algo.common.normalizers import ReturnNormalizer
from daskrl.algo.common.optimizers import load_optimizer_state, make_optimizer
from daskrl.algo.common.policy_trainer import PolicyTrainer

__all__ = ["APPOTrainer", "MinibatchCounts", "StepInputs", "TrajectoryBatch", "lag_percentile"]

if TYPE_CHECKING:
    from daskrl.algo.common.policy_trainer import TrainerOptions
    from daskrl.algo.kernels.flat_parameters import FlatParameters
    from daskrl.algo.kernels.mlp_gradients import MlpGradients
    from daskrl.config import LearnerConfig
    from daskrl.models.actor_critic import ActorCritic


@dataclass
class StepInputs:
    """A batch on the trainer's device, as one training step reads it (flat: ``t * N + n``)."""

    layout: BatchLayout  # how the step walks the batch (whole sequences or shuffled steps)
    obs: torch.Tensor  # [T * N, ...] the observations the actions were taken at (written-out gradients: prepared)
    actions: torch.Tensor  # [T * N, ...]
    rewards: torch.Tensor  # [T, N] shaped (--reward-scale, --reward-clip)
    dones: torch.Tensor  # [T, N] float
    behaviour: torch.Tensor  # [T, N] the log-probs the samplers acted with
    mine: torch.Tensor  # [T * N] bool: this policy's steps


class APPOTrainer(PolicyTrainer):
    """Owns the optimizer and the return normalizer of one policy (the rest: :class:`PolicyTrainer`);
    ``train(batch, version)`` -> metrics."""

    @classmethod
    def from_options(cls, model: ActorCritic, options: TrainerOptions, device: torch.device) -> APPOTrainer:
        return cls(model, options.learner, options.total_env_steps, device)

    def __init__(self, model: ActorCritic, cfg: LearnerConfig, total_env_steps: int,
                 device: torch.device | None = None) -> None:
        """``total_env_steps`` is the run's budget (0: none), the length of a linear learning-rate schedule.
        ``model`` is moved to ``device`` (default: the CPU)."""
        super().__init__(model, cfg, device)
        #: how a step walks its batch: whole sequences through a recurrent core, shuffled steps otherwise, or whole
        #: trajectories, each minibatch its own targets (--targets-from)
        self.layout: type[FlatBatch] | type[SequenceBatch] | type[TrajectoryMinibatches] = (
            TrajectoryMinibatches if targets_from(cfg.targets_from, model) == "minibatch"
            else SequenceBatch if model.recurrent else FlatBatch)
        self.total_env_steps = total_env_steps
        self.optimizer = make_optimizer(model.parameters(), cfg, self.hp["learning_rate"], self.kernels)
        #: an MLP actor-critic's minibatch gradients written out, not taken through autograd, into one flat buffer:
        #: clipping and an Adam step are then one kernel call each (None: --learner-kernels off, another model, or a
        #: loss the written-out one is not, with a KL penalty or per-minibatch targets)
        self.by_hand: MlpGradients | None = None
        self.flat: FlatParameters | None = None
        if cfg.kl_coef == 0 and self.layout is FlatBatch:
            self._flatten_parameters()
        self.returns = ReturnNormalizer() if cfg.normalize_returns else None
        #: samples trained on by policy lag: lag_counts[k] samples were k versions old (see :func:`lag_percentile`)
        self.lag_counts = np.zeros(1, dtype=np.int64)

    def _flatten_parameters(self) -> None:
        """The written-out gradients over one flat parameter buffer, where --learner-kernels gives them for this
        model (then the optimizer steps the buffer); autograd otherwise."""
        self.by_hand, self.flat = self.kernels.mlp_gradients(self.model, self.optimizer) or (None, None)

    def learning_rate(self, env_steps: int) -> float:
        """The learning rate the step starts with: its ``learning_rate``, on the linear schedule when one is set
        (``kl_adaptive`` changes the policy's ``learning_rate`` itself, after each epoch)."""
        return scheduled_lr(self.cfg, self.step_hp["learning_rate"], env_steps, self.total_env_steps)

    def train(self, batch: TrajectoryBatch, current_version: int, env_steps: int = 0,
              on_progress: Callable[[], None] | None = None) -> dict[str, float]:
        """One training step on ``batch``; ``on_progress`` is called after every minibatch (a heartbeat). The step
        trains with the hyperparameters in force when it begins (``step_hp``), whatever is set meanwhile."""
        self.step_hp = dict(self.hp)
        if self.flat is not None and not self.flat.intact():
            self._flatten_parameters()  # the parameters were given new memory: one buffer again, read from there
        if not all_members(self.group, batch.finite(), self.device):
            # Checked before anything is updated: a NaN/inf would otherwise enter the running observation and
            # return statistics and make every later step non-finite (and skipped) too.
            return self._skip_step(batch, current_version, env_steps)
        self._update_obs_stats(batch)
        inputs = self._inputs(batch)
        valid, lag = self._trainable(batch, current_version, inputs.mine)
        self._count_lags(lag)
        lag = lag if lag.numel() else torch.zeros(1, device=self.device)  # no sample of this policy in the batch
        flat = {"obs": inputs.obs, "actions": inputs.actions, "old_lp": inputs.behaviour.reshape(-1), "valid": valid,
                **inputs.layout.fields()}
        step_metrics: dict[str, float] = {}
        if inputs.layout.targets_per_minibatch:  # each minibatch computes its targets from its pass (_own_targets)
            flat.update(rewards=inputs.rewards.reshape(-1), dones=inputs.dones.reshape(-1), mine=inputs.mine)
        else:
            values, targets, advantages = self._targets(batch, inputs)
            flat.update(adv=advantages.reshape(-1), old_v=values.reshape(-1), targets=targets.reshape(-1))
            step_metrics["value_target_mean"] = float(targets.mean())
        lr = self.learning_rate(env_steps)
        self._set_lr(lr)
        sums, updates, skipped = self._epochs(inputs.layout, flat, on_progress)
        self.train_steps += 1
        self.skipped_steps += skipped
        # the group's samples (each member trained on its share); with several policies, this one's steps
        self.samples_trained += int(batch.valid.sum()) * self.group.world
        metrics = {k: v / max(updates, 1) for k, v in sums.items()}
        metrics.update({
            "lr": lr, "updates": updates, "skipped_updates": skipped, "valid_fraction": float(valid.float().mean()),
            "policy_lag_mean": float(lag.mean()), "policy_lag_max": float(lag.max()), **step_metrics,
        })
        return metrics

    def shape_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """``--reward-scale`` then ``--reward-clip`` (the learner trains on these; episode returns stay raw)."""
        if self.cfg.reward_scale != 1.0:
            rewards = rewards * self.cfg.reward_scale
        if self.cfg.reward_clip > 0:
            rewards = rewards.clamp(-self.cfg.reward_clip, self.cfg.reward_clip)
        return rewards

    # ---- the steps of a training step ----

    def _update_obs_stats(self, batch: TrajectoryBatch) -> None:
        """Observation statistics take this policy's observations of the step (the whole group's), before the
        policy is evaluated with them."""
        if self.obs_rms is None:
            return
        obs = batch.obs[:-1]
        seen = obs.reshape(-1, *obs.shape[2:])[batch.valid.reshape(-1)]
        update_over_group(self.obs_rms, self.model.obs_for_stats(seen), self.group, self.device)
        self.model.set_obs_stats(self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count)

    def _inputs(self, batch: TrajectoryBatch) -> StepInputs:
        """The batch on the device, and its layout: the current weights' pass over it (see :mod:`flat_batch`). With
        written-out gradients the pass runs through their forward pass, and the observations are the encoders'
        input, prepared once for the whole step."""
        T, N = batch.rewards.shape
        obs = self._tensor(batch.obs)
        actions = self._tensor(batch.actions).reshape(T * N, *batch.actions.shape[2:])
        dones = self._tensor(batch.dones).float()
        states = self._tensor(batch.rnn_states)
        if self.by_hand is None:
            layout: BatchLayout | TrajectoryMinibatches = self.layout(self.model, obs, actions, dones, states,
                                                                      self.cfg.recurrence or T)
            flat_obs = obs[:-1].reshape(T * N, *obs.shape[2:])
            if isinstance(layout, TrajectoryMinibatches) and self.cfg.bootstrap_time_limits and batch.final_index.size:
                layout.end_time_limits_at(self._tensor(batch.final_obs), self._tensor(batch.final_index))
        else:
            layout = FlatBatch(self.model, obs, actions, dones, states, T, by_hand=self.by_hand)
            flat_obs = layout.prepared
        return StepInputs(layout=layout, obs=flat_obs, actions=actions,
                          rewards=self.shape_rewards(self._tensor(batch.rewards)), dones=dones,
                          behaviour=self._tensor(batch.log_probs), mine=self._tensor(batch.valid).reshape(-1))

    def _targets(self, batch: TrajectoryBatch, inputs: StepInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(values, value targets, advantages) [T, N]: V-trace (or GAE) from the behaviour log-probs, on raw returns
        when they are normalized; the targets come back normalized, after the return statistics took them."""
        layout = inputs.layout
        with torch.no_grad():
            values = layout.values
            next_values, truncated = self._next_values(batch, layout)
            targets, advantages = self._estimate(inputs.behaviour, layout.target_lp, inputs.rewards, values,
                                                 next_values, inputs.dones, truncated, inputs.mine)
        return values, targets, advantages

    @torch.no_grad()
    def _estimate(self, behaviour: torch.Tensor, target_lp: torch.Tensor, rewards: torch.Tensor, values: torch.Tensor,
                  next_values: torch.Tensor, dones: torch.Tensor, truncated: torch.Tensor | None, mine: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(value targets, advantages) [T, B] of trajectories: V-trace (or GAE) on raw returns when they are
        normalized; the targets come back normalized, after the return statistics took this policy's (``mine``)."""
        cfg = self.cfg
        raw_values, raw_next = values, next_values
        if self.returns is not None:
            raw_values, raw_next = self.returns.denormalize(values), self.returns.denormalize(next_values)
        if cfg.advantage == "vtrace":
            targets, advantages = vtrace(behaviour, target_lp, rewards, raw_values, raw_next, dones,
                                         self.step_hp["gamma"], cfg.vtrace_rho, cfg.vtrace_c, truncated=truncated)
        else:
            advantages, targets = gae(rewards, raw_values, raw_next, dones, self.step_hp["gamma"], cfg.gae_lambda,
                                      truncated=truncated)
        if self.returns is not None:
            update_over_group(self.returns.stats, targets.reshape(-1)[mine], self.group, self.device)
            targets = self.returns.normalize(targets)
            stats = self.returns.stats
            self.model.set_return_stats(float(stats.mean), float(stats.var), stats.count)
        return targets, advantages

    def _next_values(self, batch: TrajectoryBatch, layout: BatchLayout) -> tuple[torch.Tensor, torch.Tensor | None]:
        """V(x_{t+1}) per step [T, N], and where a time limit ended the episode (None when nowhere): there
        V(x_{t+1}) is the value of the episode's real final observation, which the learner bootstraps from
        (``--bootstrap-time-limits``); elsewhere values[t + 1], and for the last step the value of obs[T] (a recurrent
        model's: each from the state after the step before)."""
        values = layout.values
        T, N = values.shape
        next_values = torch.cat([values[1:], layout.last_value.unsqueeze(0)], dim=0)
        if not self.cfg.bootstrap_time_limits or not batch.final_index.size:
            return next_values, None
        index = self._tensor(batch.final_index)
        finals = layout.final_values(self._tensor(batch.final_obs), index).to(next_values.dtype)
        next_values = next_values.reshape(-1).index_copy(0, index, finals).reshape(T, N)
        truncated = torch.zeros(T * N, dtype=torch.bool, device=self.device).index_fill_(0, index, True).reshape(T, N)
        return next_values, truncated

    def _trainable(self, batch: TrajectoryBatch, current_version: int, mine: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """[T * N] bool: this policy's samples no older than ``max_policy_lag`` versions; and those samples' lags
        (another policy's steps, or nobody's, are no sample of this one: possibly none)."""
        versions = self._tensor(batch.policy_version.astype(np.int64))
        valid = policy_lag_mask(versions, current_version, self.cfg.max_policy_lag).reshape(-1) & mine
        return valid, (current_version - versions).float().reshape(-1)[mine]

    def _count_lags(self, lag: torch.Tensor) -> None:
        """Add a step's sample lags to :attr:`lag_counts` (one small read back of the step's lag histogram)."""
        step = torch.bincount(lag.clamp(min=0).long()).cpu().numpy()
        if step.shape[0] > self.lag_counts.shape[0]:
            self.lag_counts = np.pad(self.lag_counts, (0, step.shape[0] - self.lag_counts.shape[0]))
        self.lag_counts[:step.shape[0]] += step

    def _epochs(self, layout: BatchLayout | TrajectoryMinibatches, flat: dict[str, torch.Tensor],
                on_progress: Callable[[], None] | None) -> tuple[dict[str, float], int, int]:
        """``num_epochs`` passes of minibatch SGD over ``flat``: (summed minibatch metrics, updates, skipped)."""
        total = flat["valid"].shape[0]
        mb = layout.minibatch_samples(min(self.cfg.batch_size // self.group.world, total))  # this member's share
        sums: dict[str, float] = {}
        updates = skipped = 0
        for _ in range(self.cfg.num_epochs):
            order = layout.order(mb)
            starts = range(0, order.shape[0] - mb + 1, mb)
            kl = [0.0, 0.0]  # this member's KL estimates summed over its valid samples, and those samples
            ahead = gathered_ahead(flat, order[:len(starts) * mb])
            counted = epoch_counts(flat, order, len(starts), mb, self.group,
                                   self.cfg.normalize_advantages and not layout.targets_per_minibatch)
            for start, counts in zip(starts, counted, strict=True):
                if counts.group == 0:
                    continue  # all too stale: zero gradient, yet an Adam step would still move the weights
                part = {k: ahead[k][start:start + mb] if k in ahead else v.index_select(0, order[start:start + mb])
                        for k, v in flat.items()}
                out = self._minibatch(layout, part, counts)
                if on_progress is not None:
                    on_progress()
                if out is None:
                    skipped += 1
                    continue
                updates += 1
                kl[0] += out["approx_kl"] * counts.local
                kl[1] += counts.local
                for k, v in out.items():
                    sums[k] = sums.get(k, 0.0) + v
            if self.cfg.lr_schedule == "kl_adaptive":
                self._adapt_lr(kl)
        return sums, updates, skipped

    def _adapt_lr(self, kl: list[float]) -> None:
        """--lr-schedule kl_adaptive, after an epoch: the policy's learning rate follows the epoch's mean KL
        estimate over the whole group (every member sets the same rate), from the next epoch on. An epoch without
        an applied update leaves it."""
        weighted, samples = self.group.sum_(torch.tensor(kl, dtype=torch.float64, device=self.device)).tolist()
        if samples > 0:
            self.hp["learning_rate"] = kl_adapted_lr(self.hp["learning_rate"], weighted / samples, self.cfg)
            self._set_lr(self.hp["learning_rate"])

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

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

    def _minibatch(self, layout: BatchLayout | TrajectoryMinibatches, mb: dict[str, torch.Tensor], counts: MinibatchCounts
                   ) -> dict[str, float] | None:
        """One SGD update on minibatch ``mb`` (None: skipped, its loss or gradients not finite on some member)."""
        own_targets = layout.targets_per_minibatch  # then computed from the minibatch's own pass, in _gradients
        adv = None if own_targets else normalized_with(mb["adv"], counts.adv_moments)
        valid = None if counts.local == mb["valid"].shape[0] else mb["valid"]  # None: all valid, plain means in the loss
        # this member's samples' share of the group's mean over valid samples (1 for one learner); the summed
        # gradients are then the gradient of the mean over the whole minibatch
        out = self._gradients(layout, mb, adv, valid, max(counts.local, 1) / counts.group)
        if not self.group.sum_gradients(self.model.parameters(), math.isfinite(out.total_value)):
            self.optimizer.zero_grad(set_to_none=True)
            return None
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else math.inf
        if self.flat is not None and self.flat.holds_gradients():
            norm = self.flat.clip_(max_norm)
        else:
            norm = self.kernels.clip_grad_norm(self.model.parameters(), max_norm).item()
        if not math.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.kernels.step(self.optimizer)
        metrics = {"loss": out.total_value, "policy_loss": out.policy_loss, "value_loss": out.value_loss,
                   "entropy": out.entropy, "approx_kl": out.approx_kl, "clip_fraction": out.clip_fraction,
                   "grad_norm": norm}
        if own_targets:
            metrics["value_target_mean"] = float(mb["targets"].mean())
        return metrics

    def _gradients(self, layout: BatchLayout | TrajectoryMinibatches, mb: dict[str, torch.Tensor],
                   adv: torch.Tensor | None, valid: torch.Tensor | None, scale: float) -> LossOutput:
        """The minibatch's APPO loss, and ``scale`` times its gradient in every parameter's ``.grad`` when the loss is
        finite (otherwise none, or the last minibatch's, which the caller then drops): written out for an MLP
        actor-critic with --learner-kernels auto (:mod:`daskrl.algo.kernels.mlp_gradients`, overwriting its gradient
        buffer), through autograd otherwise. ``adv`` None: the targets come from this minibatch's own pass
        (:meth:`_own_targets`)."""
        cfg, hp = self.cfg, self.step_hp
        options = {"clip_ratio": hp["clip_ratio"], "value_clip": cfg.value_clip or math.inf,
                   "entropy_coef": hp["entropy_coef"], "value_coef": cfg.value_coef}
        if self.by_hand is not None:
            return self.by_hand.appo_gradients(mb, adv, valid, scale, **options)
        self.optimizer.zero_grad(set_to_none=True)
        new_lp, entropy, new_v = layout.evaluate(mb)
        if adv is None:
            adv = self._own_targets(layout, mb, new_lp, new_v)
        out = appo_loss(new_lp, mb["old_lp"], adv, new_v, mb["old_v"], mb["targets"], entropy, valid,
                        kl_coef=cfg.kl_coef, **options)
        if math.isfinite(out.total_value):
            (out.total * scale).backward()
        return out

    @torch.no_grad()
    def _own_targets(self, layout: TrajectoryMinibatches, mb: dict[str, torch.Tensor], new_lp: torch.Tensor,
                     new_v: torch.Tensor) -> torch.Tensor:
        """A minibatch of whole trajectories: its targets from its own pass (put in ``mb``, see
        :meth:`TrajectoryMinibatches.own_targets`); returns its advantages, normalized over its valid samples across the
        group (one small collective a minibatch)."""
        adv = layout.own_targets(mb, new_lp, new_v, self._estimate)
        return normalized(adv, mb["valid"], self.group, self.cfg.normalize_advantages)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` on the trainer's device: no copy on the CPU, one pinned copy to a GPU."""
        tensor = torch.from_numpy(array)
        if self.device.type == "cpu":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    # ---- checkpoints (the rest of a trainer's state: PolicyTrainer) ----

    def own_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "optimizer_name": self.cfg.optimizer, "returns": self.returns.state_dict() if self.returns else None}

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Continue from a model's weights alone (published ones: no optimizer state). The normalizers go on from
        the statistics that travel in the weights' buffers; the optimizer starts afresh."""
        self.load_model_weights(weights)
        if self.returns is not None:
            mean, var, count = self.model.return_stats.tolist()
            self.returns.load_state_dict({"shape": [], "mean": mean, "var": var, "count": count})

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        # saved by another --optimizer: its moments do not fit this one, which starts afresh
        load_optimizer_state(self.optimizer, state, self.cfg)
        if self.returns is not None and state.get("returns"):
            self.returns.load_state_dict(state["returns"])
            stats = self.returns.stats
            self.model.set_return_stats(float(stats.mean), float(stats.var), stats.count)
