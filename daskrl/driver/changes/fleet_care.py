"""Keeping a running fleet whole, at each poll: components lost with their worker are recovered
(:mod:`.recovery`), rollout workers whose worker leaves in order are drained and retired (:mod:`.departures`), and
the run's sizing (:mod:`.fleet_sizing`) says whether one that left is replaced. What a lost or retired component had
counted stays counted in the run's state."""

from __future__ import annotations

from typing import Any

from daskrl.config import Config
from daskrl.driver.changes.departures import Departures
from daskrl.driver.changes.fleet_sizing import FleetSizing
from daskrl.driver.changes.recovery import Recovery
from daskrl.driver.fleet.fleet import Fleet
from daskrl.driver.fleet.placement import Role
from daskrl.driver.loop.component_ledger import account_retired
from daskrl.errors import ComponentError
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.monitor.console import say
from daskrl.runtime.access.runs import RunClaim
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.runtime.actors.incidents import Incidents


class FleetCare:
    """See the module docstring. The ``run`` its methods take is the live run
    (:class:`~daskrl.driver.loop.live_run.Run`): its state, book and ledger keep the counts."""

    def __init__(self, config: Config, sizing: FleetSizing, claim: RunClaim, incidents: Incidents) -> None:
        """``sizing``: fixed, or elastic (the fleet follows the cluster: a lost rollout worker with no idle worker
        left is not recreated, a drained one not replaced); ``claim``: the run's workers."""
        self.config, self.sizing, self.claim, self.incidents = config, sizing, claim, incidents
        self.fleet: Fleet | None = None
        self.recovery: Recovery | None = None
        self.departures: Departures | None = None

    def start(self, fleet: Fleet, stores: list[CheckpointStore]) -> None:
        """Care for ``fleet`` from now on (``stores``: each policy's checkpoints, which a lost learner restarts
        from)."""
        self.fleet = fleet
        self.recovery = Recovery(fleet, stores, self.config.run.max_learner_restarts, self.incidents,
                                 shrink_when_full=self.sizing.shrink_when_full,
                                 rollout_wait_s=self.sizing.rollout_wait_s, claim=self.claim,
                                 share=self.config.run.share_workers)
        self.departures = Departures(fleet, say, self.incidents)

    def collect(self, run: Any) -> list[dict]:
        """Every component's statistics; a component that is gone is recovered, or, leaving in order, retired."""
        for retired in self.departures.poll():  # drained with a worker that left in order: its last word counts
            self.retire(run, retired["handle"], retired.get("stats") or {})
        lost = self.recovery.lost_components()
        stats = []
        for handle in self.fleet.components():
            gone = (handle.bus_name, handle.address) in lost
            rollout = self.fleet.roster.role_of(handle.name) is Role.ROLLOUT
            if rollout and self.departures.is_leaving(handle):
                if gone:  # gone before its retirement report reached us
                    self.retire(run, handle, {})
                continue  # draining: its report (or, after the grace, its loss) comes next
            if gone:
                self.replace(run, handle, "its worker left the cluster")
                continue
            try:
                stats.append(handle.call("collect", timeout=10))
            except ComponentError as exc:
                if not (rollout and self.departures.closing(handle)):
                    self.replace(run, handle, str(exc))
        return stats

    def replace(self, run: Any, handle: ComponentHandle, cause: str) -> None:
        """Recreate a lost component (see recovery.py); the run goes on. A lost rollout worker's step counter
        died with it: the steps it reported stay counted."""
        if self.fleet.roster.role_of(handle.name) is Role.ROLLOUT:
            run.state.tally.lose(handle.name)
        run.ledger.end(handle.name)
        self.recovery.recover(handle, cause, run.state.env_steps)

    def retire(self, run: Any, handle: ComponentHandle, final: dict) -> None:
        """A rollout worker left with its worker, in order: count its last steps and episodes, then go on as the
        run's sizing says (without it, elastic; recreated elsewhere, fixed)."""
        account_retired(run, handle, final)
        self.sizing.after_departure(handle, self.recovery, self.fleet, run.state.env_steps)
