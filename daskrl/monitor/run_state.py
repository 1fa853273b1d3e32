"""What the runner knows about a run at each report, and the row it logs (CSV, TensorBoard, dashboard).

Everything here is derived from the statistics the components report; nothing talks to the cluster.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from daskrl.monitor.replay_stats import replay_totals
from daskrl.monitor.stats import EpisodeWindow, FrameRate
from daskrl.runtime.memory.shm import host_of

#: the row's evaluation columns (daskrl/evaluation/evaluator.py): set in the first row after an evaluation ends, NaN
#: in others
EVAL_COLUMNS = ("eval_return_mean", "eval_return_std", "eval_length_mean", "eval_episodes", "eval_env_steps",
                "eval_updates")


class EnvStepTally:
    """Env steps of the whole run from each rollout worker's own counter. A lost worker's counter dies with it:
    its last reported count is kept (:meth:`lose`), and its replacement counts from zero."""

    def __init__(self) -> None:
        self.current: dict[str, int] = {}
        self.lost = 0

    def update(self, worker: str, env_steps: int) -> None:
        self.current[worker] = int(env_steps)

    def lose(self, worker: str) -> None:
        self.lost += self.current.pop(worker, 0)

    @property
    def total(self) -> int:
        return sum(self.current.values()) + self.lost


@dataclass
class RunState:
    """What the runner knows about the run at each report."""

    started: float = field(default_factory=time.monotonic)
    env_steps: int = 0
    env_steps_offset: int = 0  # steps of the runs this one resumed
    elapsed_offset: float = 0.0
    episodes: EpisodeWindow = field(default_factory=EpisodeWindow)
    fps: FrameRate = field(default_factory=FrameRate)
    tally: EnvStepTally = field(default_factory=EnvStepTally)
    learner: dict = field(default_factory=dict)
    shares: dict = field(default_factory=dict)
    incidents: dict = field(default_factory=dict)  # kind -> count, over the driver and every component
    messages_dropped: int = 0  # bus messages that found no receiver, over all workers
    replay: list = field(default_factory=list)  # off-policy: each replay shard's numbers (monitor/replay_stats.py)
    best_return: float = -math.inf
    reached_return_at: float | None = None  # when the mean return first reached --stop-at-return (seconds)
    reached_return_mean: float | None = None  # that mean, as the stop rule read it (later episodes move the window's)
    recorded_episodes: int = 0  # --record-dataset: episodes written into the dataset so far
    # episode info numbers (EnvGroup.episode_extras): collected since the last row, and the last mean of each key
    pending_extras: dict = field(default_factory=dict)
    extra_means: dict = field(default_factory=dict)
    # evaluations that ended and are in no row yet, oldest first (None: the run does not evaluate, so the row has no
    # such columns); each row takes one, so two that end between two reports are both logged
    pending_evals: list[dict] | None = None
    # a multi-agent run's evaluation columns per agent (eval_return/<agent>), logged beside EVAL_COLUMNS
    eval_agent_columns: tuple[str, ...] = ()
    #: an offline run (--algo bc|iql|cql): it takes no env steps, and its progress is the learner's updates
    counts_updates: bool = False
    #: a curriculum's progress (daskrl/curriculum/): the task reached and the tasks passed, kept in checkpoints so a
    #: resume goes on from there; None: the run has no curriculum
    curriculum: dict | None = None
    #: a league's payoff table and ratings (daskrl/league/), kept in policy 0's checkpoints; None: no league
    league: dict | None = None
    #: who wants every finished episode's info numbers as they arrive (a curriculum reads each task's returns)
    extras_readers: list = field(default_factory=list)
    #: who wants the trained policies' finished episodes as they arrive (a league reads who beat whom)
    episode_readers: list = field(default_factory=list)

    @property
    def updates(self) -> int:
        """The learner's updates so far (a resumed learner counts on from its checkpoint's)."""
        return int(self.learner.get("train_steps", 0))

    @property
    def progress(self) -> int:
        """How far the run is in the unit of its budget and evaluation interval: updates offline, else env steps."""
        return self.updates if self.counts_updates else self.env_steps

    def add_extras(self, extras: list[dict[str, float]]) -> None:
        for reader in self.extras_readers:
            reader(extras)
        for numbers in extras:
            for key, value in numbers.items():
                self.pending_extras.setdefault(key, []).append(value)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def row(self) -> dict[str, Any]:
        m = self.learner.get("metrics", {})
        return {
            "time_s": round(self.elapsed + self.elapsed_offset, 3),
            "env_steps": self.env_steps,
            "fps": round(self.fps.rate, 1),
            "episode_return_mean": self.episodes.mean_return,
            "episode_return_std": self.episodes.std_return,
            "episode_length_mean": self.episodes.mean_length,
            "episodes": self.episodes.total,
            "episodes_in_mean": len(self.episodes.returns),
            "policy_version": self.learner.get("policy_version", 0),
            "learner_updates": self.updates,
            "policy_lag": m.get("version_diff", math.nan),
            "loss": m.get("loss", math.nan),
            "policy_loss": m.get("policy_loss", math.nan),
            "value_loss": m.get("value_loss", math.nan),
            "entropy": m.get("entropy", math.nan),
            "approx_kl": m.get("approx_kl", math.nan),
            "clip_fraction": m.get("clip_fraction", math.nan),
            "grad_norm": m.get("grad_norm", math.nan),
            "learning_rate": m.get("lr", math.nan),
            "valid_fraction": m.get("valid_fraction", math.nan),
            "incidents": sum(self.incidents.values()),
            "messages_dropped": self.messages_dropped,
            **replay_totals(self.replay),
            **self._eval_row(),
            **self._info_columns(),
            **({} if self.curriculum is None else {"curriculum_task": self.curriculum["level"]}),
        }

    def _eval_row(self) -> dict[str, Any]:
        """The evaluation columns: the oldest evaluation not logged yet, or NaN when none is waiting."""
        if self.pending_evals is None:
            return {}
        values = self.pending_evals.pop(0) if self.pending_evals else {}
        return {key: values.get(key, math.nan) for key in (*EVAL_COLUMNS, *self.eval_agent_columns)}

    def _info_columns(self) -> dict[str, float]:
        """``info/<key>``: the mean over the episodes that ended since the last row (the last mean when none did)."""
        for key, values in self.pending_extras.items():
            self.extra_means[key] = float(sum(values) / len(values))
        self.pending_extras = {}
        return {f"info/{key}": value for key, value in sorted(self.extra_means.items())}


def merge_incidents(driver: dict[str, int], stats: list[dict]) -> dict[str, int]:
    """Incident counts of the driver and of every component (by kind)."""
    out = dict(driver)
    for s in stats:
        for kind, count in s.get("incidents", {}).items():
            out[kind] = out.get(kind, 0) + int(count)
    return out


def messages_dropped(stats: list[dict]) -> int:
    """Bus messages dropped over all workers (components on one worker share its bus: counted once)."""
    per_worker = {s.get("address"): int(s.get("bus", {}).get("dropped", 0)) for s in stats}
    return sum(per_worker.values())


def data_path(last_stats: dict[str, dict], learner: str | None, ended: Sequence[dict] = ()) -> dict[str, Any]:
    """How the data moved: trajectory slots the batcher copied from shared memory (same host) or fetched over Dask
    comms (other hosts), parameter versions readers took either way, per component and in total.

    ``ended``: the last statistics of components that stopped and were replaced under the same name (a learner
    moved or restarted, a rollout worker recreated): their counters count in the totals, so that a run whose
    learner moved still accounts for every slot its earlier learners took; ``components`` shows the live ones."""
    out: dict[str, Any] = {"slots_shm": 0, "slots_comms": 0, "params_shm_reads": 0, "params_comms_reads": 0,
                           # host relays (--param-relay auto): versions samplers read in place from a relay's block,
                           # versions the relays fetched, and copies the learners served them
                           "params_relay_reads": 0, "params_relay_fetches": 0, "params_served": 0,
                           "remote_params": False, "hosts": [], "components": {},
                           # slot accounting: slots each rollout worker filled, and slots the learners took of each
                           "slots_filled": {}, "slots_taken": {}, "slots_dropped": 0,
                           # remote slots: the RPCs that carried their reads (several slots each when read in bulk),
                           # and reads that failed (the rollout worker was lost mid-read: slot dropped)
                           "remote_read_rpcs": 0, "remote_reads": 0, "slots_lost_reads": 0}
    for s in ended:
        _add_counters(out, s, _component_entry(s))
    for name, s in sorted(last_stats.items()):
        entry = _component_entry(s)
        _add_counters(out, s, entry)
        if name == learner:
            out["remote_params"] = bool(s.get("remote_params", False))
        out["components"][name] = entry
    out["hosts"] = sorted({entry["host"] for entry in out["components"].values()})
    return out


def _component_entry(s: dict) -> dict[str, Any]:
    """One component's side of :func:`data_path`: where it ran and what it read or served."""
    counters, batcher = s.get("counters", {}), s.get("batcher", {})
    entry = {"cls": s.get("cls"), "address": s.get("address"), "host": host_of(s.get("address")),
             "params_shm_reads": int(counters.get("params_shm_reads", 0)),
             "params_comms_reads": int(counters.get("params_comms_reads", 0)),
             **{key: int(counters[key]) for key in ("params_relay_reads", "params_relay_fetches") if key in counters},
             **({"params_served": int(s["params_served"])} if "params_served" in s else {})}
    if batcher:
        entry.update(slots_shm=int(batcher.get("slots_shm", 0)), slots_comms=int(batcher.get("slots_comms", 0)))
    return entry


def _add_counters(out: dict[str, Any], s: dict, entry: dict[str, Any]) -> None:
    """Add one component's counters (its statistics ``s`` and its :func:`_component_entry`) to the totals."""
    batcher = s.get("batcher", {})
    if "slots_filled" in s:
        name = s.get("name")
        out["slots_filled"][name] = out["slots_filled"].get(name, 0) + int(s["slots_filled"])
    out["slots_dropped"] += int(batcher.get("dropped_slots", 0))  # announced by a replaced worker: memory gone
    out["slots_lost_reads"] += int(batcher.get("lost_reads", 0))
    out["remote_read_rpcs"] += int(batcher.get("remote_reads", {}).get("rpcs", 0))
    out["remote_reads"] += int(batcher.get("remote_reads", {}).get("reads", 0))
    for worker, taken in batcher.get("slots_by_worker", {}).items():
        out["slots_taken"][worker] = out["slots_taken"].get(worker, 0) + int(taken)
    for way in ("shm", "comms"):
        out[f"copy_s_{way}"] = out.get(f"copy_s_{way}", 0.0) + float(batcher.get(f"copy_s_{way}", 0.0))
        out[f"slots_{way}"] += entry.get(f"slots_{way}", 0)
    for key in ("params_shm_reads", "params_comms_reads", "params_relay_reads", "params_relay_fetches",
                "params_served"):
        out[key] += entry.get(key, 0)
