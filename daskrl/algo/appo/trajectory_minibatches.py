"""Value targets per minibatch (``--targets-from minibatch``): minibatches of whole trajectories, each its own V-trace.

The other layouts (:class:`~daskrl.algo.appo.flat_batch.FlatBatch`,
:class:`~daskrl.algo.appo.recurrent.SequenceBatch`) run the whole batch through the model once without gradients
before the first minibatch, for V-trace's target log-probs and values; then every minibatch runs its samples through
the model again, with gradients. For an image policy that first pass is a third of the learner's forward work (a
sixth to a quarter of its step). Here, as in Sample Factory, a minibatch is a set of whole trajectories (env columns,
all ``T`` steps), so V-trace's backward recursion runs within it, on the log-probs and values of the very pass its
loss makes: the targets are those of the weights the minibatch trains (not of the weights the step began with), and
the batch is read once a pass, not twice.

What the minibatch's own pass leaves out is computed beside it without gradients: the value of the observation
after each column's last step (the bootstrap) and of the real final observations of episodes a time limit cut.
The value loss has no earlier values to clip against (the values are the pass's own), so ``--value-clip`` does
nothing in this mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from daskrl.config import RECURRENT_MINIBATCH_TARGETS, TARGETS_FROM

if TYPE_CHECKING:
    from daskrl.models.actor_critic import ActorCritic


def targets_from(setting: str, model: ActorCritic) -> str:
    """--targets-from for ``model``: 'auto' is 'minibatch' for a feed-forward image policy (the Nature CNN or IMPALA
    encoder), whose forward passes are nearly all of a step, so the pass over the whole batch was a sixth to a quarter
    of it; 'batch' otherwise (an MLP's pass over the batch is cheap, and its minibatches of shuffled steps are the
    documented results). A recurrent core trains on sequences with their states from the pass over the batch."""
    if setting not in TARGETS_FROM:
        raise ValueError(f"--targets-from must be one of {', '.join(TARGETS_FROM)}, got {setting!r}")
    if setting == "minibatch" and model.recurrent:
        raise ValueError(RECURRENT_MINIBATCH_TARGETS)
    if setting != "auto":
        return setting
    image = model.spaces.is_image and model.encoder_name in ("cnn", "impala")
    return "minibatch" if image and not model.recurrent else "batch"


class TrajectoryMinibatches:
    """A feed-forward model's batch walked as whole trajectories; samples are indexed flat, ``t * N + n``."""

    #: each minibatch computes its value targets and advantages from its own pass (:meth:`own_targets`), where the
    #: other layouts take them from the trainer's pass over the whole batch
    targets_per_minibatch = True

    def __init__(self, model: ActorCritic, obs: torch.Tensor, actions: torch.Tensor, dones: torch.Tensor,
                 states: torch.Tensor, length: int) -> None:
        """The arguments of the other layouts, so the trainer makes any of them the same way: ``obs``
        [T + 1, N, ...] (kept for the bootstrap values), ``actions`` [T * N, ...], ``dones`` [T, N]; ``states`` and
        ``length`` mean nothing without a core. No pass over the batch here: each minibatch makes its own."""
        self.model = model
        self.T, self.N = dones.shape
        self.last_obs = obs[-1]  # [N, ...] the observation after each column's last step
        self.device = dones.device
        #: [T * N] each step's row in the time-limit final observations (-1: none), see :meth:`end_time_limits_at`
        self.final_row = torch.full((self.T * self.N,), -1, dtype=torch.long, device=self.device)
        self.final_obs: torch.Tensor | None = None

    def end_time_limits_at(self, final_obs: torch.Tensor, index: torch.Tensor) -> None:
        """Episodes a time limit cut at flat steps ``index`` [M] bootstrap from their real final observations
        ``final_obs`` [M, ...] (``--bootstrap-time-limits``)."""
        self.final_obs = final_obs
        self.final_row[index] = torch.arange(index.numel(), device=self.device)

    def fields(self) -> dict[str, torch.Tensor]:
        """Each sample's flat index (a minibatch finds its columns by it) and its final observation's row."""
        return {"index": torch.arange(self.T * self.N, device=self.device), "final_row": self.final_row}

    def minibatch_samples(self, samples: int) -> int:
        """Samples per minibatch, rounded to whole trajectories (at least one column, at most all)."""
        return min(max(samples // self.T, 1), self.N) * self.T

    def order(self, samples: int) -> torch.Tensor:
        """An epoch's flat sample indices: shuffled columns, ``samples // T`` of them a minibatch, each minibatch laid
        out time-major [T, columns]; columns that fill no minibatch wait for the next epoch's shuffle."""
        per = samples // self.T
        perm = torch.randperm(self.N, device=self.device)
        columns = perm[:perm.numel() // per * per].reshape(-1, per)  # [minibatches, per]
        steps = torch.arange(self.T, device=self.device)
        return (steps[None, :, None] * self.N + columns[:, None, :]).reshape(-1)

    def evaluate(self, part: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy, value) of a minibatch ``part``, with gradients."""
        return self.model.evaluate(part["obs"], part["actions"])

    def next_values(self, part: dict[str, torch.Tensor], values: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """V(x_{t+1}) per step of a minibatch [T, B] from its own ``values`` [T, B]; and where a time limit ended the
        episode (None when nowhere in it), where V(x_{t+1}) is the value of the real final observation."""
        per = values.shape[1]
        columns = part["index"][-per:] - (self.T - 1) * self.N  # the last row of a time-major minibatch
        with torch.no_grad():
            last = self.model.value(self.last_obs[columns]).to(values.dtype)
            next_values = torch.cat([values[1:], last.unsqueeze(0)], dim=0)
            rows = part["final_row"]
            cut = rows >= 0
            if self.final_obs is None or not bool(cut.any()):
                return next_values, None
            where = cut.nonzero().squeeze(1)
            finals = self.model.value(self.final_obs[rows[where]]).to(values.dtype)
            next_values = next_values.reshape(-1).index_copy(0, where, finals).reshape(values.shape)
        return next_values, cut.reshape(values.shape)

    def own_targets(self, part: dict[str, torch.Tensor], new_lp: torch.Tensor, new_v: torch.Tensor,
                    estimate: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """A minibatch's V-trace (or GAE) from its own pass's log-probs and values (``estimate``: the trainer's, on
        [T, B] trajectories), put in ``part`` (``old_v``: those values; ``targets``); returns its advantages [T * B]."""
        with torch.no_grad():
            values = new_v.detach().reshape(self.T, -1)
            next_values, truncated = self.next_values(part, values)
            targets, adv = estimate(part["old_lp"].reshape(self.T, -1), new_lp.detach().reshape(self.T, -1),
                                    part["rewards"].reshape(self.T, -1), values, next_values,
                                    part["dones"].reshape(self.T, -1), truncated, part["mine"])
        part.update(old_v=values.reshape(-1), targets=targets.reshape(-1))
        return adv.reshape(-1)
