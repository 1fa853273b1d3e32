"""How a training step walks its batch: the layout interface, and its feed-forward form.

A layout is chosen once per trainer (by the model: :class:`FlatBatch` for a feed-forward one,
:class:`~daskrl.algo.appo.recurrent.SequenceBatch` for a recurrent core) and made once per step, so the trainer has no
branch on recurrence. At construction a layout runs the whole batch through the current weights without gradients
(V-trace's target log-probs, the values, the bootstrap value after the last step); then it says how many samples a
minibatch holds, in what order an epoch visits them, and evaluates a minibatch with gradients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from daskrl.algo.kernels.mlp_gradients import MlpGradients
    from daskrl.models.actor_critic import ActorCritic


class BatchLayout(Protocol):
    """One training step's batch as the trainer walks it; samples are indexed flat, ``t * N + n``."""

    target_lp: torch.Tensor  # [T, N] the current weights' log-probs of the batch's actions
    values: torch.Tensor  # [T, N] the current weights' values
    last_value: torch.Tensor  # [N] the value of the observation after the last step (the bootstrap)
    #: False: the trainer computes the value targets and advantages once, from this pass over the whole batch, before
    #: the first minibatch (:class:`~daskrl.algo.appo.trajectory_minibatches.TrajectoryMinibatches` says True)
    targets_per_minibatch: bool

    def final_values(self, final_obs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Values of time-limit final observations [M, ...], the ones of flat steps ``index`` [M]."""

    def fields(self) -> dict[str, torch.Tensor]:
        """Per-sample fields [T * N, ...] a minibatch needs beyond the trainer's (gathered with them)."""

    def minibatch_samples(self, samples: int) -> int:
        """How many samples a minibatch of at most about ``samples`` holds."""

    def order(self, samples: int) -> torch.Tensor:
        """An epoch's flat sample indices, minibatches of ``samples`` (a :meth:`minibatch_samples`) after another."""

    def evaluate(self, part: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy, value) of a minibatch ``part`` (its fields gathered), with gradients."""


#: rows per piece of the no-gradient pass over a whole batch: a small MLP's activations for 1,024 rows stay in the
#: core's cache between its operators, and bench_learner's CartPole step trained about 8% more samples a second
#: than with one pass over all 4,096 (an image model's pieces are as large as its minibatches already)
EVAL_ROWS = 1024


class FlatBatch:
    """A feed-forward model's batch: every step is a sample of its own, shuffled one by one."""

    targets_per_minibatch = False  # a sample's targets need the steps after it, which its minibatch lacks

    def __init__(self, model: ActorCritic, obs: torch.Tensor, actions: torch.Tensor, dones: torch.Tensor,
                 states: torch.Tensor, length: int, by_hand: MlpGradients | None = None) -> None:
        """The arguments of :class:`~daskrl.algo.appo.recurrent.SequenceBatch`, so the trainer makes either the same way:
        ``obs`` [T + 1, N, ...], ``actions`` [T * N, ...], ``dones`` [T, N]; ``states`` (width 0) and ``length``
        (sequences) mean nothing without a core. With ``by_hand`` (the model's written-out gradients) the pass runs
        through its plain forward pass, and the observations it prepared stay for the minibatches (:attr:`prepared`)."""
        T, N = dones.shape
        self.model = model
        self.total = T * N
        self.device = dones.device
        #: [T * N, D] the observations as the encoders read them, normalized once for the whole step (with
        #: ``by_hand`` only: autograd's minibatches prepare their own)
        self.prepared: torch.Tensor | None = None
        with torch.no_grad():
            if by_hand is None:
                flat = obs[:-1].reshape(T * N, *obs.shape[2:])
                pieces = zip(flat.split(EVAL_ROWS), actions.split(EVAL_ROWS), strict=True)
                parts = [(lp, v) for lp, _, v in (model.evaluate(o, a) for o, a in pieces)]
                self.last_value = model.value(obs[-1])
            else:
                inputs = by_hand.prepare(obs.reshape((T + 1) * N, *obs.shape[2:]))
                self.prepared = inputs[:T * N]
                pieces = zip(self.prepared.split(EVAL_ROWS), actions.split(EVAL_ROWS), strict=True)
                parts = [by_hand.evaluate(x, a) for x, a in pieces]
                self.last_value = by_hand.value(inputs[T * N:])
            self.target_lp = torch.cat([lp for lp, _ in parts]).reshape(T, N)
            self.values = torch.cat([v for _, v in parts]).reshape(T, N)

    def final_values(self, final_obs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.model.value(final_obs)

    def fields(self) -> dict[str, torch.Tensor]:
        return {}

    def minibatch_samples(self, samples: int) -> int:
        return samples

    def order(self, samples: int) -> torch.Tensor:
        """Every step once, shuffled (samples that fill no minibatch wait for the next epoch's shuffle)."""
        return torch.randperm(self.total, device=self.device)

    def evaluate(self, part: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.model.evaluate(part["obs"], part["actions"])


#: the largest sample of a field gathered in an epoch's order at once, not minibatch by minibatch
GATHER_AHEAD_BYTES = 1024


def gathered_ahead(flat: dict[str, torch.Tensor], order: torch.Tensor) -> dict[str, torch.Tensor]:
    """The fields of small samples (vectors, scalars) in the epoch's ``order``: one gather each for the epoch, and
    a minibatch's are views. Larger samples (frames) are gathered minibatch by minibatch: an epoch's frames at once
    are tens of MB, and the Nature CNN learner trained 6% slower so. Gathers are ``index_select``: indexing with a
    tensor took 7x as long for a minibatch of Atari frames (4.4 against 0.6 ms for 256)."""
    return {k: v.index_select(0, order) for k, v in flat.items() if v[0].nbytes <= GATHER_AHEAD_BYTES}
