"""Turn-based columns of a policy's cut of a tagged slot, compacted so V-trace (or GAE) sees each agent's own turns.

In a turn-based multi-agent env (PettingZoo AEC: tictactoe, ...) an agent's column holds its own rows (the steps it
acted at) interleaved with the other players' rows, where it waits: observation zeros, and the rewards and done
flags the others' moves gave it (:mod:`daskrl.envs.multi_agent`'s reward rule credits them to its last own row).
The trainer runs its recursion over the whole ``[T, N]`` block, so an own row at ``t`` would bootstrap from the
waiting row ``t + 1`` (a zero observation) and its rewards would sit on masked rows. Here each such column's own
rows move to the front, in order, and own row ``k`` (at slot step ``t_k``) gets:

- reward: the column's rewards from ``t_k`` up to, not including, ``t_{k+1}`` (or the slot's end), stopping after
  the first row its episode ended at (what comes after belongs to the next episode, before its first action);
- terminated/truncated: whether a row of that range has it (a time limit's final observation moves along);
- next observation: the compacted row ``k + 1``, that is ``obs[t_{k+1}]``.

The last own row must bootstrap from the agent's observation at its next turn. When its episode did not end in
the slot it is marked truncated (the time-limit mechanism: cut the trace, bootstrap from ``final_obs``) with:

- ``obs[T]`` when the slot's step ``T`` is the agent's own turn (``policy_id`` has a row ``T`` for this): exact;
- otherwise its next turn, and whatever the other players' moves give it before, lies in the next slot, where it
  is before that slot's first own row and is dropped. Nothing about the outcome of this last action is known, so
  the row bootstraps from the agent's own observation at ``t_last`` (so the rows before it get a near-zero trace
  correction from it: ``r + gamma V(x) - V(x)``) and is left out of the loss (``valid`` False): any target for it
  would be a guess, and a guess of "no advantage" still moves the policy once advantages are normalized. The
  waiting player's observation at ``T`` (were the env to write it) would be a state its value head never trains
  on (the opponent to move), so it is not a better guess.

After the last own row the column is padding (zeros, ``valid`` False): that row ends or is truncated, which cuts
the recursion, so padding never reaches a valid row. A recurrent policy's slot-start state is zeroed for a column
whose episode ended before its first own row (the sampler reset it there; the dropped rows carried that reset).
Columns whose own rows are never followed by another row without an episode end in between (single-agent envs,
parallel multi-agent envs, where an agent that finished early has ``done`` on its last own row) are untouched:
:func:`compact_turns` costs them one vectorized check.
"""

from __future__ import annotations

import numpy as np

#: the per-step fields of a cut slot that move with their row (time-major, [T, K, ...]; obs has T + 1 rows)
ROW_FIELDS = ("actions", "log_probs", "policy_version")


def interleaved(own: np.ndarray, done: np.ndarray) -> np.ndarray:
    """[K] bool: columns with an own row whose next row (step ``T`` included) is not its own although its episode
    did not end at it. ``own`` is [T + 1, K] (row T: who acts first in the next slot), ``done`` [T, K]."""
    return (own[:-1] & ~own[1:] & ~done).any(axis=0)


def compact_turns(out: dict[str, np.ndarray], own_next: np.ndarray) -> dict[str, np.ndarray]:
    """Compact the turn-based columns of a policy's cut of a slot in place (see the module docstring).

    ``out`` is what :func:`daskrl.learning.batcher._policy_columns` made: ``valid`` [T, K] (this policy's rows),
    obs/actions/rewards/flags/log-probs/versions of the K kept columns, ``final_at`` numbered ``t * K + k``;
    ``own_next`` [K]: this policy acts at step T of each column. Returns ``out``."""
    valid = out["valid"]
    done = (out["terminated"] | out["truncated"]).astype(bool)
    cols = np.flatnonzero(interleaved(np.concatenate([valid, own_next[None]]), done))
    if not cols.size:
        return out
    T, K = valid.shape
    n = cols.size
    own, done = valid[:, cols], done[:, cols]
    seg = np.cumsum(own, axis=0) - 1  # [T, n] the own row whose range holds step t (-1: before the first)
    n_own = seg[-1] + 1
    ended_before = np.cumsum(done, axis=0) - done  # episode ends among the steps before t
    at_start = np.maximum.accumulate(np.where(own, ended_before, -1), axis=0)  # ... before t's own row
    counted = (seg >= 0) & (ended_before == at_start)  # in its own row's range: no end since that row
    ct, cj = np.nonzero(counted)
    target = seg[ct, cj] * n + cj  # the compacted row (flat [T, n]) that step gets credited to
    size = T * n

    def summed(field: np.ndarray) -> np.ndarray:
        return np.bincount(target, weights=field[:, cols][ct, cj], minlength=size).reshape(T, n)

    rewards = summed(out["rewards"]).astype(out["rewards"].dtype)
    terminated = summed(out["terminated"]) > 0
    truncated = summed(out["truncated"]) > 0
    ot, oj = np.nonzero(own)  # every own row, and its compacted row seg[ot, oj]
    ok = seg[ot, oj]
    last_t = T - 1 - np.argmax(own[::-1], axis=0)  # [n] each column's last own step
    last_k = n_own - 1

    finals_obs, finals_at = _remapped_finals(out, cols, counted, seg)
    open_end = ~(terminated[last_k, np.arange(n)] | truncated[last_k, np.arange(n)])
    exact = open_end & own_next[cols]
    guess = open_end & ~own_next[cols]
    truncated[last_k[open_end], np.flatnonzero(open_end)] = True
    new_obs = [out["obs"][T, cols[exact]], out["obs"][last_t[guess], cols[guess]]]
    new_at = [last_k[exact] * K + cols[exact], last_k[guess] * K + cols[guess]]

    obs = np.zeros((T + 1, n, *out["obs"].shape[2:]), out["obs"].dtype)
    obs[ok, oj] = out["obs"][ot, cols[oj]]
    out["obs"][:, cols] = obs
    for name in ROW_FIELDS:
        field = out[name]
        moved = np.zeros((T, n, *field.shape[2:]), field.dtype)
        if name == "policy_version":  # padding keeps the last own version (no made-up lag in any statistic)
            moved[:] = field[last_t, cols]
        moved[ok, oj] = field[ot, cols[oj]]
        field[:, cols] = moved
    out["rewards"][:, cols] = rewards
    out["terminated"][:, cols] = terminated
    out["truncated"][:, cols] = truncated
    mine = np.arange(T)[:, None] < n_own[None, :]
    mine[last_k[guess], np.flatnonzero(guess)] = False
    valid[:, cols] = mine
    if "rnn_states" in out:  # an episode that ended before the first own row reset the state the column starts from
        first_t = np.argmax(own, axis=0)
        out["rnn_states"][cols[ended_before[first_t, np.arange(n)] > 0]] = 0.0
    out["final_obs"] = np.concatenate([finals_obs, *new_obs]).astype(out["final_obs"].dtype, copy=False)
    out["final_at"] = np.concatenate([finals_at, *new_at]).astype(np.int32)
    return out


def _remapped_finals(out: dict[str, np.ndarray], cols: np.ndarray, counted: np.ndarray, seg: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The slot's time-limit finals, those of compacted columns moved to the own row whose range holds them (and
    dropped where none does: before the column's first own row)."""
    final_at = out["final_at"].astype(np.int64)
    K = out["valid"].shape[1]
    t, b = np.divmod(final_at, K)
    where = np.full(K, -1)
    where[cols] = np.arange(cols.size)
    j = where[b]
    moved = j >= 0
    keep = ~moved.copy()
    tm, jm = t[moved], j[moved]
    ok = counted[tm, jm]
    keep[np.flatnonzero(moved)[ok]] = True
    new_at = final_at.copy()
    new_at[np.flatnonzero(moved)[ok]] = seg[tm[ok], jm[ok]] * K + b[moved][ok]
    return out["final_obs"][keep], new_at[keep]
