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

from dataclasses import dataclass

import numpy as np

#: the per-step fields of a cut slot that move with their row (time-major, [T, K, ...]; obs has T + 1 rows)
ROW_FIELDS = ("actions", "log_probs", "policy_version")


def interleaved(own: np.ndarray, done: np.ndarray) -> np.ndarray:
    """[K] bool: columns with an own row whose next row (step ``T`` included) is not its own although its episode
    did not end at it. ``own`` is [T + 1, K] (row T: who acts first in the next slot), ``done`` [T, K]."""
    return (own[:-1] & ~own[1:] & ~done).any(axis=0)


@dataclass
class TurnColumns:
    """The turn-based columns of a cut (``cols``, n of them) and where each of their steps' credit goes."""

    cols: np.ndarray  # [n] their indices among the cut's K columns
    own: np.ndarray  # [T, n] bool: the column's own rows
    seg: np.ndarray  # [T, n] the own row whose range holds step t (-1: before the first)
    n_own: np.ndarray  # [n] own rows per column
    ended_before: np.ndarray  # [T, n] episode ends among the steps before t
    counted: np.ndarray  # [T, n] bool: step t is in its own row's range, with no episode end since that row

    @property
    def last_t(self) -> np.ndarray:
        """[n] each column's last own step."""
        return self.own.shape[0] - 1 - np.argmax(self.own[::-1], axis=0)


def compact_turns(out: dict[str, np.ndarray], own_next: np.ndarray, state_fields: tuple[str, ...] = ()
                  ) -> dict[str, np.ndarray]:
    """Compact the turn-based columns of a policy's cut of a slot in place (see the module docstring).

    ``out`` is what :class:`daskrl.learning.slot_reader.PolicyColumns` made: ``valid`` [T, K] (this policy's rows),
    obs/actions/rewards/flags/log-probs/versions of the K kept columns, ``final_at`` numbered ``t * K + k``, and the
    per-column start states ``state_fields`` [K, ...]; ``own_next`` [K]: this policy acts at step T of each column.
    Returns ``out``."""
    valid = out["valid"]
    done = (out["terminated"] | out["truncated"]).astype(bool)
    cols = np.flatnonzero(interleaved(np.concatenate([valid, own_next[None]]), done))
    if not cols.size:
        return out
    turns = _turn_columns(cols, valid[:, cols], done[:, cols])
    rewards, terminated, truncated = _credited(out, turns)
    finals_obs, finals_at = _remapped_finals(out, cols, turns.counted, turns.seg)
    bootstrap_obs, bootstrap_at, guess = _bootstraps(out, turns, terminated, truncated, own_next[cols])
    _move_own_rows(out, turns)
    out["rewards"][:, cols] = rewards
    out["terminated"][:, cols] = terminated
    out["truncated"][:, cols] = truncated
    mine = np.arange(valid.shape[0])[:, None] < turns.n_own[None, :]
    mine[turns.n_own[guess] - 1, np.flatnonzero(guess)] = False
    valid[:, cols] = mine
    first_t = np.argmax(turns.own, axis=0)  # an episode that ended before the first own row reset the start state
    for name in state_fields:
        out[name][cols[turns.ended_before[first_t, np.arange(cols.size)] > 0]] = 0.0
    out["final_obs"] = np.concatenate([finals_obs, *bootstrap_obs]).astype(out["final_obs"].dtype, copy=False)
    out["final_at"] = np.concatenate([finals_at, *bootstrap_at]).astype(np.int32)
    return out


def _turn_columns(cols: np.ndarray, own: np.ndarray, done: np.ndarray) -> TurnColumns:
    """Each step's own row (the last own row at or before it) and whether its credit counts there: not before the
    column's first own row, and not after an episode ended since that row (it belongs to the next episode)."""
    seg = np.cumsum(own, axis=0) - 1
    ended_before = np.cumsum(done, axis=0) - done
    at_start = np.maximum.accumulate(np.where(own, ended_before, -1), axis=0)  # ... before t's own row
    counted = (seg >= 0) & (ended_before == at_start)
    return TurnColumns(cols, own, seg, seg[-1] + 1, ended_before, counted)


def _credited(out: dict[str, np.ndarray], turns: TurnColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[T, n] rewards, terminated and truncated of the compacted rows: each own row's range summed (a flag: any)."""
    T, n = turns.own.shape
    ct, cj = np.nonzero(turns.counted)
    target = turns.seg[ct, cj] * n + cj  # the compacted row (flat [T, n]) that step gets credited to

    def summed(field: np.ndarray) -> np.ndarray:
        return np.bincount(target, weights=field[:, turns.cols][ct, cj], minlength=T * n).reshape(T, n)

    rewards = summed(out["rewards"]).astype(out["rewards"].dtype)
    return rewards, summed(out["terminated"]) > 0, summed(out["truncated"]) > 0


def _bootstraps(out: dict[str, np.ndarray], turns: TurnColumns, terminated: np.ndarray, truncated: np.ndarray,
                own_next: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The last own row of a column whose episode did not end in the slot is marked truncated (in ``truncated``)
    and bootstraps from a final observation: ``obs[T]`` when step T is its turn (exact), else its own last
    observation (a guess). Returns those observations, their flat rows (``k * K + column``) and ``guess`` [n]. Read
    before the rows move."""
    T, K = out["valid"].shape
    cols, n = turns.cols, turns.cols.size
    last_t, last_k = turns.last_t, turns.n_own - 1
    open_end = ~(terminated[last_k, np.arange(n)] | truncated[last_k, np.arange(n)])
    exact = open_end & own_next
    guess = open_end & ~own_next
    truncated[last_k[open_end], np.flatnonzero(open_end)] = True
    bootstrap_obs = [out["obs"][T, cols[exact]], out["obs"][last_t[guess], cols[guess]]]
    bootstrap_at = [last_k[exact] * K + cols[exact], last_k[guess] * K + cols[guess]]
    return bootstrap_obs, bootstrap_at, guess


def _move_own_rows(out: dict[str, np.ndarray], turns: TurnColumns) -> None:
    """Each turn-based column's own rows to the front, in order; zeros after them (the policy version: the last own
    one, so padding makes up no lag in any statistic)."""
    T, n = turns.own.shape
    cols = turns.cols
    ot, oj = np.nonzero(turns.own)  # every own row, and its compacted row seg[ot, oj]
    ok = turns.seg[ot, oj]
    obs = np.zeros((T + 1, n, *out["obs"].shape[2:]), out["obs"].dtype)
    obs[ok, oj] = out["obs"][ot, cols[oj]]
    out["obs"][:, cols] = obs
    for name in ROW_FIELDS:
        field = out[name]
        moved = np.zeros((T, n, *field.shape[2:]), field.dtype)
        if name == "policy_version":
            moved[:] = field[turns.last_t, cols]
        moved[ok, oj] = field[ot, cols[oj]]
        field[:, cols] = moved


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
