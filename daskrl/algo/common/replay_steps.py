"""What the off-policy trainers share when they train on several replay minibatches in a row (one learner request's
worth): the loop over them (:class:`ReplayTrainer`), which minibatches are finite, and the per-update metrics kept
as tensors until the last update.

Converting a metric to a Python number waits for the device and costs a call per value; gathering them as 0-d
tensors and converting all of them once per request keeps the updates themselves free of that overhead.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from daskrl.algo.common.lr_schedule import scheduled_lr
from daskrl.algo.common.policy_trainer import PolicyTrainer


def finite_rows(batches: dict[str, np.ndarray], fields: Iterable[str]) -> np.ndarray:
    """[K] bool: whether minibatch k's float ``fields`` ([K, B, ...] each) hold only finite values (integer fields,
    such as uint8 frames, always do)."""
    count = len(batches[next(iter(fields))])
    ok = np.ones(count, bool)
    for name in fields:
        values = batches[name]
        if np.issubdtype(values.dtype, np.floating):
            ok &= np.isfinite(values.reshape(count, -1)).all(axis=1)
    return ok


class StepMetrics:
    """Per-update scalar metrics, one stacked tensor per update; :meth:`means` turns them into numbers in one go."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.rows: list[torch.Tensor] = []

    def add(self, metrics: dict[str, torch.Tensor]) -> None:
        """One update's 0-d tensors (the same names every time)."""
        self.names = self.names or list(metrics)
        with torch.no_grad():
            self.rows.append(torch.stack([metrics[name].reshape(()).float() for name in self.names]))

    def means(self) -> dict[str, float]:
        """{name: mean over the updates added} (empty if none was)."""
        if not self.rows:
            return {}
        return dict(zip(self.names, torch.stack(self.rows).mean(0).cpu().tolist(), strict=True))


def grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """The gradients' total norm, clipped to ``max_norm`` first where it is above 0 (0: no clipping, and then no
    multiplication by a clip coefficient of exactly 1 either)."""
    if max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    return torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])


#: a parameter group's rate as a multiple of the step's --learning-rate (1 where absent): an optimizer with a rate of
#: its own (CQL's actor) keeps it through the schedule and the hyperparameter steering that set every group's rate
LR_SCALE = "lr_scale"


def own_learning_rate(optimizer: torch.optim.Optimizer, rate: float, learning_rate: float) -> None:
    """Give ``optimizer`` the rate ``rate`` (0: ``learning_rate`` itself), kept as its ratio to ``learning_rate``, so
    :meth:`ReplayTrainer.train_many` scales it as it scales the others."""
    scale = rate / learning_rate if rate > 0 else 1.0
    for group in optimizer.param_groups:
        group[LR_SCALE], group["lr"] = scale, learning_rate * scale


def skipped_metrics(count: int) -> dict[str, float]:
    """The metrics of ``count`` minibatches none of which updated the networks."""
    return {"updates": 0, "skipped_updates": count}


class ReplayTrainer(PolicyTrainer):
    """An off-policy trainer: one learner request's minibatches trained in order (:meth:`train_many`), or one
    (:meth:`train`). The subclass gives its update (:meth:`update`), its optimizers (each takes the step's learning
    rate) and the float fields a minibatch must hold finite (:attr:`finite_fields`)."""

    finite_fields: tuple[str, ...] = ("obs", "rewards", "next_obs")

    def optimizers(self) -> list[torch.optim.Optimizer]:
        raise NotImplementedError

    def update(self, t: dict[str, torch.Tensor], weights: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """One update on one minibatch of tensors; its metrics (0-d tensors) and TD errors, or None where the loss
        or the gradients were not finite (nothing applied)."""
        raise NotImplementedError

    def step_into(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: list[torch.Tensor]
                  ) -> torch.Tensor:
        """Backward into ``params`` (``optimizer``'s) only, clip (``--max-grad-norm``, 0: no clipping), step: one of
        the several optimizers an actor-critic update steps in turn (SAC's, TD3's). Returns the gradient norm (a
        tensor: read once per request)."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=params)
        norm = grad_norm(params, self.cfg.max_grad_norm)
        self.kernels.step(optimizer)
        return norm

    def follow_obs(self, obs: np.ndarray) -> None:
        """Observation statistics follow the observations about to be trained on (with ``--normalize-obs``)."""
        self.obs_rms.update(self.model.obs_for_stats(obs))
        self.model.set_obs_stats(self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count)

    def train(self, batch: dict[str, np.ndarray], weights: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
        """One update on a minibatch (the fields of :data:`daskrl.replay.store.FIELDS`) with importance ``weights``;
        returns the metrics and the TD errors (the transitions' new priorities). A minibatch whose loss or
        gradients are not finite is skipped: its TD errors are then all zero."""
        metrics, td_errors, _ = self.train_many({k: v[None] for k, v in batch.items()}, np.asarray(weights)[None])
        return metrics, td_errors[0]

    def train_many(self, batches: dict[str, np.ndarray], weights: np.ndarray, env_steps: int = 0,
                   total_env_steps: int = 0) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
        """One update per minibatch, in order: ``batches`` holds K minibatches ([K, B, ...] per field), ``weights``
        [K, B]; at ``env_steps`` of ``total_env_steps``, where --lr-schedule linear sets the rate. Returns the
        metrics (means over the updates made), the TD errors [K, B] (zero for a skipped minibatch) and which
        minibatches updated [K]. The metrics stay tensors until the last update."""
        self.step_hp = dict(self.hp)
        self.step_hp["learning_rate"] = scheduled_lr(self.cfg, self.hp["learning_rate"], env_steps, total_env_steps)
        for optimizer in self.optimizers():
            for group in optimizer.param_groups:
                group["lr"] = self.step_hp["learning_rate"] * group.get(LR_SCALE, 1.0)
        count, size = weights.shape
        finite = finite_rows(batches, self.finite_fields)
        t = {k: torch.as_tensor(v, device=self.device) for k, v in batches.items()}
        w = torch.as_tensor(weights, device=self.device)
        td = torch.zeros(count, size, device=self.device)  # filled on the device, read back once
        applied, steps = np.zeros(count, bool), StepMetrics()
        for k in np.flatnonzero(finite).tolist():
            if self.obs_rms is not None:
                self.follow_obs(batches["obs"][k])
            done = self.update({name: value[k] for name, value in t.items()}, w[k])
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
