"""The runs on a cluster: which daskrl run holds which workers, kept on the scheduler.

A Dask cluster is a shared thing, and several runs may train on it at once. Each run has a name unique on the
cluster and claims the workers its components use, all at once or none: the scheduler runs one handler at a time,
so two runs starting together can never both win a worker. A claim lives as long as its driver: a run whose client
leaves the scheduler (its process ended, or was killed) or that has not said it is alive for :data:`LEASE_S`
seconds is dropped, and its workers are free for the next run. A run that shares (``--share-workers``) may place
its components on workers other runs hold.

:class:`RunRegistry` is the scheduler plugin; :class:`RunClaim` is a driver's handle on its own record, and
:func:`list_runs` what ``daskrl runs`` and the dashboard read.
"""

from __future__ import annotations

import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado.ioloop import PeriodicCallback

from daskrl.errors import ClusterAccessError
from daskrl.runtime import dask_internals
from daskrl.runtime.messaging.wiring import registry_call

PLUGIN_NAME = "daskrl-run-registry"
#: seconds a run's claim outlives its driver's last sign of life
LEASE_S = 120.0
#: seconds between two looks for runs whose lease ran out
EXPIRE_EVERY_S = 5.0


class RunRegistry(SchedulerPlugin):
    """The runs of the cluster and their workers (see the module docstring)."""

    name = PLUGIN_NAME
    idempotent = True  # every run installs it; the first one stays

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        dask_internals.add_scheduler_handlers(scheduler, {
            "daskrl_run_open": self.open, "daskrl_run_claim": self.claim, "daskrl_run_release": self.release,
            "daskrl_run_beat": self.beat, "daskrl_run_close": self.end, "daskrl_runs": self.table,
            "daskrl_run_command": self.command, "daskrl_run_params": self.params,
            "daskrl_run_league": self.league,
        })
        self._expiry = PeriodicCallback(self.expire, EXPIRE_EVERY_S * 1000)
        self._expiry.start()

    # ---- handlers ----

    async def open(self, name: str, experiment: str, client: str, share: bool = False) -> dict[str, Any]:
        """Record a new run; refused while a live run has that name."""
        if name in self.runs:
            other = self.runs[name]
            return {"status": "taken", "message": f"a run named {name!r} is already training on this cluster "
                    f"(experiment {other['experiment']!r}, started {time.time() - other['started']:.0f} s ago): "
                    "give this one another --experiment"}
        now = time.time()
        self.runs[name] = {"name": name, "experiment": experiment, "client": client, "share": bool(share),
                           "workers": [], "started": now, "beat": now, "state": "starting", "report": {},
                           "commands": []}
        return {"status": "ok"}

    async def claim(self, name: str, workers: list[str]) -> dict[str, Any]:
        """Give ``workers`` to run ``name``, all of them or none: refused (``held``: worker -> the run holding it)
        when another run holds one, unless this run shares."""
        run = self.runs.get(name)
        if run is None:
            return {"status": "unknown", "message": f"no run named {name!r} is open on this cluster"}
        held = {} if run["share"] else self.held_by_others(name, workers)
        if held:
            return {"status": "busy", "held": held}
        run["workers"] = sorted(set(run["workers"]) | set(workers))
        return {"status": "ok", "workers": run["workers"]}

    async def release(self, name: str, workers: list[str]) -> dict[str, Any]:
        run = self.runs.get(name)
        if run is not None:
            run["workers"] = [w for w in run["workers"] if w not in workers]
        return {"status": "ok"}

    async def beat(self, name: str, state: str = "running", report: dict | None = None,
                   params: list | None = None) -> dict[str, Any]:
        """The driver is alive; ``report``: the run's newest numbers (env steps, frames/s, return); ``params``: each
        policy's parameter block (where a policy server that follows the run reads its newest weights). The reply
        hands over the requests attached handles sent since the last beat (:meth:`command`)."""
        run = self.runs.get(name)
        if run is None:
            return {"status": "unknown", "commands": []}
        run["beat"], run["state"] = time.time(), state
        if report:
            run["report"] = dict(report)
        if params is not None:
            run["params"] = list(params)
        commands, run["commands"] = run["commands"], []
        return {"status": "ok", "commands": commands}

    async def command(self, name: str, command: dict) -> dict[str, Any]:
        """A request for run ``name``'s driver (``{"op": "stop" | "set" | "scale", ...}``), taken at its next
        beat."""
        run = self.runs.get(name)
        if run is None:
            return {"status": "unknown", "message": f"no run named {name!r} is live on this cluster"}
        run["commands"].append(dict(command))
        return {"status": "ok"}

    async def league(self, name: str, seats: dict) -> dict[str, Any]:
        """Run ``name`` is a member of a league of runs: its seats (its member, role, parameter blocks and snapshot
        versions: :class:`daskrl.league.members.PeerSeats`), where the other member runs read them."""
        run = self.runs.get(name)
        if run is None:
            return {"status": "unknown"}
        run["league"] = dict(seats)
        return {"status": "ok"}

    async def params(self, name: str) -> dict[str, Any]:
        """Run ``name``'s parameter blocks, one per policy (empty until its driver's first beat), and its experiment
        directory."""
        run = self.runs.get(name)
        if run is None:
            live = ", ".join(sorted(self.runs)) or "none"
            return {"status": "unknown", "message": f"no run named {name!r} is training on this cluster (live runs: "
                                                    f"{live})"}
        # a league member's seats only while it trains: a stopping run's learners are about to remove their blocks
        return {"status": "ok", "params": run.get("params", []), "experiment": run["experiment"],
                "league": run.get("league") if run["state"] == "running" else None}

    async def end(self, name: str) -> dict[str, Any]:
        """The run ended: its workers are free."""
        self.runs.pop(name, None)
        return {"status": "ok"}

    async def table(self) -> dict[str, Any]:
        now = time.time()
        return {"runs": [{**{k: v for k, v in run.items() if k not in ("params", "league")}, "age_s": now - run["started"],
                          "silent_s": now - run["beat"]} for run in self.runs.values()],
                "workers": sorted(self.scheduler.workers)}

    # ---- what frees claims ----

    def held_by_others(self, name: str, workers: list[str]) -> dict[str, str]:
        """Which of ``workers`` other runs hold (worker -> run)."""
        holders = {w: other for other, run in self.runs.items() if other != name for w in run["workers"]}
        return {w: holders[w] for w in workers if w in holders}

    def expire(self) -> None:
        """Drop the runs whose driver has not beaten for :data:`LEASE_S` seconds."""
        now = time.time()
        for name in [n for n, run in self.runs.items() if now - run["beat"] > LEASE_S]:
            del self.runs[name]

    async def close(self) -> None:
        """The scheduler closes."""
        self._expiry.stop()

    def remove_client(self, scheduler: Any, client: str) -> None:
        """A driver's client left: its runs end, and their workers are free."""
        for name in [n for n, run in self.runs.items() if run["client"] == client]:
            del self.runs[name]

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        for run in self.runs.values():
            if worker in run["workers"]:
                run["workers"].remove(worker)


class RunClaim:
    """A driver's handle on its run's record (see the module docstring): every call is one round trip to the
    scheduler, from the driver's thread."""

    def __init__(self, client: Any, name: str) -> None:
        self.client, self.name = client, name
        self.experiment, self.share = "", False
        self.workers: set[str] = set()  # what this run claimed (to claim again if the registry forgot it)

    def open(self, experiment: str, share: bool) -> None:
        """Record the run; raises :class:`ClusterAccessError` when a live run already has its name."""
        self.experiment, self.share = experiment, share
        reply = self._call("daskrl_run_open", experiment=experiment, client=self.client.id, share=share)
        if reply["status"] != "ok":
            raise ClusterAccessError(reply["message"])

    def claim(self, workers: list[str]) -> dict[str, str]:
        """Claim ``workers``; returns ``{}`` when they are this run's now, else the workers other runs hold (worker
        -> run), and then none was claimed."""
        reply = self._call("daskrl_run_claim", workers=list(workers))
        if reply["status"] == "unknown":  # its lease ran out (a driver that did not beat): it must open again
            raise ClusterAccessError(reply["message"])
        if reply["status"] == "ok":
            self.workers |= set(workers)
            return {}
        return reply["held"]

    def release(self, workers: list[str]) -> None:
        self.workers -= set(workers)
        self._call("daskrl_run_release", workers=list(workers))

    def beat(self, state: str, report: dict[str, Any] | None = None,
             params: list[dict | None] | None = None) -> list[dict[str, Any]]:
        """The run is alive (``state``, its newest numbers, each policy's parameter block); returns what attached
        handles asked of it since. A registry that forgot the run (a driver silent past the lease, a scheduler
        restarted) gets it back, with the workers it still uses."""
        reply = self._call("daskrl_run_beat", state=state, report=report or {}, params=params)
        if reply["status"] == "unknown":
            self.open(self.experiment, self.share)
            self._call("daskrl_run_claim", workers=sorted(self.workers))
        return reply.get("commands", [])

    def tell_league(self, seats: dict[str, Any]) -> None:
        """This run's seats in a league of runs, for the other member runs (see :meth:`RunRegistry.league`)."""
        self._call("daskrl_run_league", seats=seats)

    def close(self) -> None:
        self._call("daskrl_run_close")

    def others(self) -> dict[str, str]:
        """Every worker another run holds (worker -> run)."""
        return {w: run["name"] for run in list_runs(self.client)["runs"] if run["name"] != self.name
                for w in run["workers"]}

    def _call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        return self.client.sync(getattr(self.client.scheduler, op), name=self.name, **kwargs)


def send_command(client: Any, name: str, command: dict[str, Any]) -> None:
    """Ask run ``name``'s driver (wherever it runs) to stop, set or scale, at its next beat."""
    reply = client.sync(client.scheduler.daskrl_run_command, name=name, command=command)
    if reply["status"] != "ok":
        raise ClusterAccessError(reply["message"])


def run_params(client: Any, name: str) -> dict[str, Any]:
    """``{"params": [...], "experiment": dir, "league": seats}``: the parameter block of each policy of run ``name``
    as its driver last told the registry (empty before its first beat), its experiment directory, and its seats in a
    league of runs (None: it is no member of one, or has not told them yet). ``client`` None: from a
    component's own thread. Raises :class:`ClusterAccessError` when no live run has that name."""
    reply = registry_call(client, "daskrl_run_params", name=name)
    if reply["status"] != "ok":
        raise ClusterAccessError(reply["message"])
    return reply


def list_runs(client: Any) -> dict[str, Any]:
    """``{"runs": [...], "workers": [...]}``: every live run (name, experiment, workers, state, its newest report,
    age) and every worker of the cluster (no run on a scheduler where no daskrl run has started yet: the registry
    comes with the first)."""
    reply = client.sync(client.scheduler.daskrl_runs)
    if not isinstance(reply, dict):
        return {"runs": [], "workers": sorted(dask_internals.cluster_workers(client))}
    return reply
