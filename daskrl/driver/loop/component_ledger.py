"""What a run heard from its components: each one's newest statistics, the last statistics of incarnations that
ended (a learner that moved or restarted keeps its name, a rollout worker recreated likewise: what they moved still
counts in the data path's totals), which ones went silent, and the run's own counted hiccups; and what a rollout
worker that left in order said last (:func:`account_retired`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from daskrl.monitor.run_state import data_path
from daskrl.protocol import HEARTBEATS_TOPIC
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.runtime.actors.incidents import Incidents

logger = logging.getLogger(__name__)


class ComponentLedger:
    """See the module docstring."""

    def __init__(self, heartbeat_timeout: float, warn: Callable[[str], None],
                 log_event: Callable[[str, dict], None]) -> None:
        """``heartbeat_timeout``: seconds a component's loop may stand still before it is named (``warn``, and a
        dashboard event through ``log_event``)."""
        self.heartbeat_timeout, self.warn, self.log_event = heartbeat_timeout, warn, log_event
        self.last_stats: dict[str, dict] = {}  # the newest stats of each component (counters, no episodes)
        self.ended_stats: list[dict] = []  # the last stats of components replaced under the same name
        self.silent: set[str] = set()  # components named as silent, until they turn again
        self.incidents = Incidents(logger, "runner")  # the run's own hiccups that did not stop it

    def keep(self, stats: list[dict]) -> None:
        """The newest stats of each component; those of one that now runs elsewhere under the same name (a learner
        that moved) end (:attr:`ended_stats`)."""
        for s in stats:
            if s.get("name"):
                kept = self.last_stats.get(s["name"])
                if kept is not None and kept.get("address") != s.get("address"):
                    self.end(s["name"])
                self.last_stats[s["name"]] = {k: v for k, v in s.items() if k not in ("episodes", "stack")}

    def end(self, name: str) -> None:
        """Component ``name``'s current incarnation ended: its last stats go to :attr:`ended_stats`."""
        last = self.last_stats.pop(name, None)
        if last is not None:
            self.ended_stats.append(last)

    def data_path(self, learner: str | None) -> dict[str, Any]:
        """How the run's data moved (see :func:`~daskrl.monitor.run_state.data_path`); ``learner``: policy 0's."""
        return data_path(self.last_stats, learner, self.ended_stats)

    def check_heartbeat(self, stats: dict) -> None:
        """Name a component whose loop has not turned for the heartbeat timeout, with what it is doing."""
        age, name = stats.get("heartbeat_age_s", 0.0), stats.get("name")
        if age <= self.heartbeat_timeout:
            self.silent.discard(name)
            return
        if name in self.silent:
            return
        self.silent.add(name)
        where = " <- ".join(line.strip() for line in reversed(stats.get("stack", [])[-3:])) or "unknown"
        self.warn(f"component {name!r} has been silent for {age:.0f} s; it is in: {where}")
        self.log_event(HEARTBEATS_TOPIC, {"component": name, "age_s": age, "stack": stats.get("stack", [])})


def account_retired(run: Any, handle: ComponentHandle, final: dict) -> None:
    """A rollout worker that left in order (``final``: its last statistics): count its last steps and episodes."""
    if final.get("env_steps") is not None:
        run.state.tally.update(handle.name, final["env_steps"])
    trained = run.book.trained(final.get("episodes", []))
    run.state.episodes.extend(trained)
    run.book.add_episodes(trained)
    run.ledger.keep([final] if final.get("name") else [])
    run.outputs.take_news(final)  # the slots it filled and the episodes it recorded since the last poll
    run.state.tally.lose(handle.name)
