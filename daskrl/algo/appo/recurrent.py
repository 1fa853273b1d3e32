"""The recurrent side of a training step (``--rnn``): truncated backpropagation through time over whole sequences.

A batch of ``N`` env columns of ``T`` steps (whole slots) is cut into chunks of ``R = --recurrence`` steps; one
chunk of one column is a *sequence*, and minibatches are sets of whole sequences (shuffled as sequences, never as
single steps). At the start of the step the batch runs through the model once without gradients, from the states
the samplers stored at each slot's start and with resets where episodes begin. That one pass gives V-trace its
target log-probs and values, the state entering every chunk (so a chunk after the first starts from the learner's
current weights' state, not a stale one), the bootstrap value of the step after the last (from the state after
the last step) and the value of each time-limit final observation (from the state after its episode's last step).
Each minibatch then runs its sequences from those states with gradients through ``R`` steps. V-trace and the loss
are the feed-forward ones. It is the recurrent form of :class:`~daskrl.algo.appo.flat_batch.BatchLayout`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from daskrl.models.actor_critic import ActorCritic


class SequenceBatch:
    """One training step's sequences (see the module docstring); samples are indexed flat, ``t * N + n``."""

    targets_per_minibatch = False  # the sequences' states come from the pass over the whole batch, as the targets do

    def __init__(self, model: ActorCritic, obs: torch.Tensor, actions: torch.Tensor, dones: torch.Tensor,
                 states: torch.Tensor, length: int) -> None:
        """``obs`` [T + 1, N, ...], ``actions`` [T * N, ...], ``dones`` [T, N] float (the episode ended after step
        t), ``states`` [N, S] (entering step 0, already reset where an episode begins there), ``length`` R."""
        T, N = dones.shape
        if tuple(states.shape) != (N, model.state_size):
            raise ValueError(f"a recurrent model trains on batches with the states of their slots' starts ([{N}, "
                             f"{model.state_size}]), not {list(states.shape)}")
        if T % length:
            raise ValueError(f"--recurrence {length} does not divide the slot length {T}")
        self.model, self.T, self.N, self.R = model, T, N, length
        # starts[t]: the episode begins at step t (step 0's reset is already in the stored state)
        self.starts = torch.cat([torch.zeros_like(dones[:1]), dones[:-1]])
        with torch.no_grad():
            lp, _, values, before = model.evaluate_sequence(obs[:-1], actions.reshape(T, N, *actions.shape[1:]),
                                                            states.float(), self.starts, keep=range(0, T, length))
            self.target_lp, self.values = lp.reshape(T, N), values.reshape(T, N)
            self.before = before  # the state entering step t, before its reset, at every boundary and at T
            self.chunk_states = torch.cat([before[t] for t in range(0, T, length)])  # [(T / R) * N, S]
            self.last_value = model.value_step(obs[-1], before[T] * (1.0 - dones[-1]).unsqueeze(-1))

    def final_values(self, final_obs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Values of time-limit final observations at flat ``index``, each from the state after its step (an
        episode ending at t resets at t + 1, so that state is kept)."""
        with torch.no_grad():
            rows = [self.before[t + 1][n] for t, n in zip((index // self.N).tolist(), (index % self.N).tolist(),
                                                          strict=True)]
            return self.model.value_step(final_obs, torch.stack(rows))

    def fields(self) -> dict[str, torch.Tensor]:
        """Each sample's flat index: a minibatch finds its sequences' chunks and episode starts by it."""
        return {"index": torch.arange(self.T * self.N, device=self.starts.device)}

    def minibatch_samples(self, samples: int) -> int:
        """Samples per minibatch, rounded to whole sequences (at least one, at most all)."""
        sequences = (self.T // self.R) * self.N
        return min(max(samples // self.R, 1), sequences) * self.R

    def order(self, samples: int) -> torch.Tensor:
        """An epoch's shuffled flat sample indices, ``samples`` (a :meth:`minibatch_samples`) after another: each
        minibatch is whole sequences, laid out time-major [R, sequences]; sequences that fill no minibatch wait for
        the next epoch's shuffle, as left-over samples do without a core."""
        per = samples // self.R
        device = self.starts.device
        perm = torch.randperm((self.T // self.R) * self.N, device=device)
        perm = perm[:perm.numel() // per * per]
        chunk, column = perm // self.N, perm % self.N
        steps = torch.arange(self.R, device=device)
        index = (chunk[:, None] * self.R + steps[None, :]) * self.N + column[:, None]  # [sequences, R]
        return index.reshape(-1, per, self.R).transpose(1, 2).reshape(-1)

    def evaluate(self, part: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy, value) of a minibatch ``part`` (fields gathered at its ``index``), with gradients
        through its sequences."""
        index = part["index"]
        per = index.numel() // self.R
        first = index[:per]  # step 0 of each sequence
        chunk_rows = (first // self.N) // self.R * self.N + first % self.N
        obs, actions = part["obs"], part["actions"]
        lp, entropy, value, _ = self.model.evaluate_sequence(
            obs.reshape(self.R, per, *obs.shape[1:]), actions.reshape(self.R, per, *actions.shape[1:]),
            self.chunk_states[chunk_rows], self.starts.reshape(-1)[index].reshape(self.R, per))
        return lp, entropy, value
