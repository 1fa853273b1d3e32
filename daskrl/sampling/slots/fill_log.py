"""--record-schedule, the rollout worker's half: which split filled each slot, and with which policy versions.

The runner gathers the worker's entries with its news (:meth:`FillLog.news`) and writes them into the experiment's
schedule (:mod:`daskrl.monitor.outputs.schedule_file`), which ``daskrl replay`` re-executes. An entry is
``[split, slot, version runs]``: the versions as ``[t0, v0, t1, v1, ...]``, each ``v`` acting from step ``t`` on to
the next ``t`` (inline acting takes a new version between two steps, so a slot of 128 steps holds one to a few).
"""

from __future__ import annotations

import numpy as np


def version_runs(versions: np.ndarray) -> list[int]:
    """``[t0, v0, t1, v1, ...]``: the steps of ``versions`` where the version changes, and the version from there on."""
    changes = np.flatnonzero(np.diff(versions)) + 1
    starts = np.concatenate([[0], changes])
    return [int(x) for pair in zip(starts, versions[starts], strict=True) for x in pair]


def versions_from_runs(runs: list[int], steps: int) -> np.ndarray:
    """The per-step versions :func:`version_runs` was given (``steps`` of them)."""
    out = np.empty(steps, np.int32)
    starts, values = runs[0::2], runs[1::2]
    for k, (t, v) in enumerate(zip(starts, values, strict=True)):
        out[t:starts[k + 1] if k + 1 < len(starts) else steps] = v
    return out


class FillLog:
    """Every slot this worker filled, in order (see the module docstring)."""

    def __init__(self, worker_index: int, incarnation: str) -> None:
        self.worker_index, self.incarnation = worker_index, incarnation
        self.entries: list[list] = []

    def filled(self, split: int, slot_index: int, versions: np.ndarray) -> None:
        self.entries.append([split, slot_index, version_runs(versions)])

    def news(self) -> dict:
        """The entries since the last call, for the runner."""
        entries, self.entries = self.entries, []
        return {"fills": {"worker": self.worker_index, "inc": self.incarnation, "entries": entries}} if entries else {}


class NoFillLog:
    """Without --record-schedule: nothing is kept."""

    def filled(self, split: int, slot_index: int, versions: np.ndarray) -> None:
        pass

    def news(self) -> dict:
        return {}

