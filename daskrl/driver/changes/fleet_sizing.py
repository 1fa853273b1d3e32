"""How a run's fleet is sized: fixed (the fleet the config asks for, whole, for the whole run) or elastic (the fleet
follows the cluster). Chosen once at launch (:func:`daskrl.driver.launch.start.sizing_for`) and handed to what
differs between the two: the deployment (how many workers it cannot start without), placement (whether a run may
start with fewer rollout workers than asked), the recovery (whether a lost rollout worker waits for a busy process)
and the run (what follows a drained rollout worker, and which observers watch the cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from daskrl.config import Config
from daskrl.driver.changes.elastic import fixed_workers
from daskrl.driver.fleet.placement import fitted_to, workers_needed
from daskrl.driver.loop.observers import Observer

if TYPE_CHECKING:
    from daskrl.driver.changes.recovery import Recovery
    from daskrl.driver.fleet.fleet import Fleet
    from daskrl.runtime.actors.handles import ComponentHandle


class FleetSizing:
    """A fixed fleet (and what an elastic one changes of it): the fleet the config asks for, placed whole (or
    refused), and a component that leaves is recreated."""

    #: a lost rollout worker with no idle worker left shares a busy process rather than go missing
    shrink_when_full = False
    #: seconds the recovery waits for a lost rollout worker's process to come back under its name
    rollout_wait_s = 15.0

    def start_with(self, config: Config) -> int:
        """Worker processes the run cannot start without (a deployment waits for them)."""
        return workers_needed(config)

    def fit(self, workers: dict[str, dict], config: Config, held: dict[str, str],
            say: Callable[[str], None]) -> Config:
        """The config to place on ``workers`` (those in ``held`` are other runs'): as asked."""
        return config

    def observers(self) -> list[Observer]:
        """The observers that watch the cluster for this sizing: none."""
        return []

    def after_departure(self, handle: ComponentHandle, recovery: Recovery, fleet: Fleet, env_steps: int) -> None:
        """A rollout worker left with its worker, drained: recreated elsewhere."""
        recovery.recover(handle, "its worker left the cluster (drained)", env_steps)


class ElasticSizing(FleetSizing):
    """The fleet follows the cluster: it starts with the rollout workers that fit (at least one), grows on workers
    that join, moves learners off workers that retire, and goes on without what leaves while no idle worker is
    left (daskrl/driver/changes/elastic.py, retirements.py)."""

    shrink_when_full = True
    rollout_wait_s = 10.0

    def __init__(self, watchers: list[Observer]) -> None:
        """``watchers``: the observers that follow the cluster (elastic growth, learners moved off retiring
        workers), made by the launch, which may import what a run's loop must not."""
        self.watchers = watchers

    def start_with(self, config: Config) -> int:
        return fixed_workers(config) + 1

    def fit(self, workers: dict[str, dict], config: Config, held: dict[str, str],
            say: Callable[[str], None]) -> Config:
        return fitted_to(workers, config, held, say)

    def observers(self) -> list[Observer]:
        return list(self.watchers)

    def after_departure(self, handle: ComponentHandle, recovery: Recovery, fleet: Fleet, env_steps: int) -> None:
        """Gone with its worker: the run goes on without it (a worker that joins gets a rollout worker again)."""
        fleet.samplers.forget(handle)
