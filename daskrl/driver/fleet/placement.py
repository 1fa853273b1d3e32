"""Which Dask worker runs which busy component: one busy component per worker process.

Roles are pinned through Dask worker resources where the user set them (a worker started with
``--resources learner=1`` gets a learner; ``rollout=1`` and ``inference=1`` likewise). Workers that declare a
``GPU`` resource (``dask worker --resources GPU=1``) go to the learners first, then to remote inference (unless
their device option says cpu), and to rollout workers last. The remaining roles take the remaining workers in name
order. Too few workers is a configuration error, found before anything is created.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daskrl.config import Config
from daskrl.devices import check_cluster as check_devices
from daskrl.driver.launch.sizing import check_fits_cluster
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import ConfigError
from daskrl.runtime import dask_internals
from daskrl.runtime.access.runs import RunClaim


class Role(enum.Enum):
    """What a component does in a run; the fleet knows its components by role, never by class name."""

    LEARNER = "learner"  # the only learner, or the leader (rank 0) of a data-parallel group
    LEARNER_MEMBER = "learner group member"  # ranks 1.. of a group: train on their shares, publish nothing
    ROLLOUT = "rollout"
    INFERENCE = "inference"
    SINK = "sink"
    REPLAY = "replay shard"  # off-policy algorithms: keeps transitions, on a rollout worker's Dask worker
    RELAY = "parameter relay"  # one per host with samplers but no learner: copies each version there once


ROLES = ("learner", "rollout", "inference")  # the roles that need a worker process of their own
#: seconds between two looks at the cluster while a run waits for workers (--wait-for-workers)
WAIT_POLL_S = 1.0


@dataclass
class Placement:
    learners: list[str]  # by policy, then rank: the first is policy 0's (its group's leader)
    rollout: list[str]
    inference: list[str]  # by policy, then index
    names: dict[str, str] = field(default_factory=dict)  # address -> worker name (stable across restarts)
    #: address -> its nanny's address (none for a worker without one): whether a lost worker may come back
    nannies: dict[str, str] = field(default_factory=dict)

    def know(self, address: str, info: dict) -> None:
        """Remember worker ``address``'s name and nanny (``info``: its entry of the scheduler's workers), as the
        run starts to use it."""
        self.names[address] = str(info.get("name", address))
        if info.get("nanny"):
            self.nannies[address] = str(info["nanny"])

    @property
    def learner(self) -> str | None:
        """Where the (leading) learner runs; None when sampling only."""
        return self.learners[0] if self.learners else None

    def addresses(self) -> list[str]:
        """Every worker the run's components start on."""
        return sorted(set(self.learners + self.rollout + self.inference))


def role_counts(config: Config) -> dict[str, int]:
    s = config.sampler
    learners = config.learner.num_learners * config.policies.num_policies
    return {"learner": 0 if config.run.sampling_only else learners, "rollout": s.num_workers,
            "inference": s.num_inference_workers * config.policies.num_policies if s.inference == "remote" else 0}


def workers_needed(config: Config) -> int:
    """Worker processes a run needs: one per busy component."""
    return sum(role_counts(config).values())


def place(workers: dict[str, dict], config: Config, held: dict[str, str] | None = None) -> Placement:
    """``workers`` is ``dask_internals.cluster_workers(client)`` (address -> info with "name", "resources");
    ``held``: the workers other runs on the cluster hold (address -> run), which this run does not use."""
    counts = role_counts(config)
    need = sum(counts.values())
    held = held or {}
    every = dict(workers)
    workers = {a: w for a, w in workers.items() if a not in held}
    if len(workers) < need:
        raise ConfigError([too_few_workers(len(workers) + len(held), held, counts)])
    order = sorted(workers, key=lambda a: (str(workers[a].get("name", a)), a))
    free = list(order)
    chosen: dict[str, list[str]] = {role: [] for role in ROLES}

    def has(address: str, resource: str) -> bool:
        return bool(workers[address].get("resources", {}).get(resource))

    for role in ROLES:  # pinned first
        for address in order:
            if len(chosen[role]) < counts[role] and address in free and has(address, role):
                chosen[role].append(address)
                free.remove(address)
    wants_gpu = {"learner": config.learner.learner_device != "cpu",
                 "inference": config.sampler.inference_device != "cpu", "rollout": False}
    for role in ROLES:
        def preference(address: str, role: str = role) -> tuple[bool, bool]:
            pinned_elsewhere = any(has(address, r) for r in ROLES if r != role)
            return pinned_elsewhere, has(address, "GPU") != wants_gpu[role]

        for address in sorted(free, key=preference):  # stable: name order within a preference
            if len(chosen[role]) >= counts[role]:
                break
            chosen[role].append(address)
            free.remove(address)
    placement = Placement(chosen["learner"], chosen["rollout"], chosen["inference"])
    for address, info in every.items():
        placement.know(address, info)
    return placement


def too_few_workers(total: int, held: dict[str, str], counts: dict[str, int]) -> str:
    """The one line that says why a run does not fit the cluster, and what would make it fit."""
    need = sum(counts.values())
    runs = sorted(set(held.values()))
    others = f" ({len(held)} of them held by other runs: {', '.join(repr(r) for r in runs)})" if held else ""
    fixes = "wait for them with --wait-for-workers SECONDS, share them with --share-workers, " if held else ""
    return (f"the cluster has {total} worker processes{others} but this run needs {need}{' free ones' if held else ''} "
            f"(one per busy component: {counts['rollout']} rollout, {counts['inference']} inference, "
            f"{counts['learner']} learner); {fixes}add workers or lower --num-workers / --num-inference-workers / "
            "--num-learners / --num-policies")


#: the config to place on the cluster's workers (the others' held ones: worker -> run), with what to say
FitToWorkers = Callable[[dict[str, dict], Config, dict[str, str], Callable[[str], None]], Config]


def place_claimed(client: Any, config: Config, spaces: EnvSpaces, claim: RunClaim, check_memory: bool,
                  say: Callable[[str], None], fit: FitToWorkers) -> tuple[Placement, Config]:
    """:func:`place` on the workers no other run holds (any, with ``--share-workers``), claimed for this run, and
    checked against what they have before anything is created (:func:`check_placement`). ``fit``: the config to
    place on the workers there are (the run's sizing says: an elastic run starts with the rollout workers that fit,
    at least one, and grows as workers join; a fixed one as asked). While too few are free, a run waits up to
    ``--wait-for-workers`` seconds (saying so once), then is refused in one line that names the runs holding the
    workers. Returns the placement and the config it was made for (fewer rollout workers, when an elastic run
    started small)."""
    deadline = time.monotonic() + config.run.wait_for_workers
    waiting = False
    while True:
        workers = dask_internals.cluster_workers(client)
        held = {} if config.run.share_workers else claim.others()
        try:
            started = fit(workers, config, held, say)
            placement = place(workers, started, held)
        except ConfigError as exc:
            if time.monotonic() >= deadline:
                raise
            if not waiting:
                say(f"daskrl: waiting up to {config.run.wait_for_workers:g} s for workers: {exc.problems[0]}")
                waiting = True
            claim.beat("waiting for workers")  # its claim outlives a wait longer than the registry's lease
            time.sleep(WAIT_POLL_S)
            continue
        if not claim.claim(placement.addresses()):  # none taken by a run that claimed at the same moment
            check_placement(client, started, spaces, placement, workers, check_memory)
            return placement, started


def fitted_to(workers: dict[str, dict], config: Config, held: dict[str, str], say: Callable[[str], None]) -> Config:
    """An elastic run on a cluster with too few free workers for all its rollout workers: as many as fit (at least
    one), said in one line; the config as it is when all fit, or when not even one does (:func:`place` refuses)."""
    free = len([a for a in workers if a not in held])
    counts = role_counts(config)
    fit = free - counts["learner"] - counts["inference"]
    if fit >= counts["rollout"] or fit < 1:
        return config
    say(f"daskrl: the cluster has {free} free worker processes: this elastic run starts with {fit} of its "
        f"{counts['rollout']} rollout workers and grows as workers join")
    return config.replace(num_workers=fit)


def check_placement(client: Any, config: Config, spaces: EnvSpaces, placement: Placement, workers: dict[str, dict],
                    check_memory: bool) -> None:
    """The devices asked for, and (``check_memory``: on a cluster of yours) the memory for the slots and the batch,
    against what the chosen workers have."""
    check_devices(client, [(a, "--learner-device", config.learner.learner_device) for a in placement.learners]
                  + [(a, "--inference-device", config.sampler.inference_device) for a in placement.inference],
                  placement.names)
    if check_memory:
        check_fits_cluster(config, spaces, workers)
