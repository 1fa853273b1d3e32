"""Which Dask worker runs which busy component: one busy component per worker process.

Roles are pinned through Dask worker resources where the user set them (a worker started with
``--resources learner=1`` gets a learner; ``rollout=1`` and ``inference=1`` likewise). Workers that declare a
``GPU`` resource (``dask worker --resources GPU=1``) go to the learners first, then to remote inference (unless
their device option says cpu), and to rollout workers last. The remaining roles take the remaining workers in name
order. Too few workers is a configuration error, found before anything is created.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from daskrl.config import Config
from daskrl.devices import check_cluster as check_devices
from daskrl.driver.sizing import check_fits_cluster
from daskrl.envs.spaces import EnvSpaces
from daskrl.errors import ConfigError


class Role(enum.Enum):
    """What a component does in a run; the fleet knows its components by role, never by class name."""

    LEARNER = "learner"  # the only learner, or the leader (rank 0) of a data-parallel group
    LEARNER_MEMBER = "learner group member"  # ranks 1.. of a group: train on their shares, publish nothing
    ROLLOUT = "rollout"
    INFERENCE = "inference"
    SINK = "sink"


ROLES = ("learner", "rollout", "inference")  # the roles that need a worker process of their own


@dataclass
class Placement:
    learners: list[str]  # by policy, then rank: the first is policy 0's (its group's leader)
    rollout: list[str]
    inference: list[str]  # by policy, then index
    names: dict[str, str] = field(default_factory=dict)  # address -> worker name (stable across restarts)

    @property
    def learner(self) -> str | None:
        """Where the (leading) learner runs; None when sampling only."""
        return self.learners[0] if self.learners else None


def role_counts(config: Config) -> dict[str, int]:
    s = config.sampler
    learners = config.learner.num_learners * config.policies.num_policies
    return {"learner": 0 if config.run.sampling_only else learners, "rollout": s.num_workers,
            "inference": s.num_inference_workers * config.policies.num_policies if s.inference == "remote" else 0}


def workers_needed(config: Config) -> int:
    """Worker processes a run needs: one per busy component."""
    return sum(role_counts(config).values())


def place(workers: dict[str, dict], config: Config) -> Placement:
    """``workers`` is ``client.scheduler_info()["workers"]`` (address -> info with "name", "resources")."""
    counts = role_counts(config)
    need = sum(counts.values())
    if len(workers) < need:
        raise ConfigError([
            f"the cluster has {len(workers)} worker processes but this run needs {need} (one per busy component: "
            f"{counts['rollout']} rollout, {counts['inference']} inference, {counts['learner']} learner); add "
            "workers or lower --num-workers / --num-inference-workers / --num-learners / --num-policies"
        ])
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
    return Placement(chosen["learner"], chosen["rollout"], chosen["inference"],
                     {a: str(workers[a].get("name", a)) for a in workers})


def place_checked(client: Any, config: Config, spaces: EnvSpaces, check_memory: bool) -> Placement:
    """:func:`place` on the cluster's workers now, checked against what they have before anything is created:
    the devices asked for and (``check_memory``: on a cluster of yours) the memory for the slots and the batch."""
    workers = client.scheduler_info()["workers"]
    placement = place(workers, config)
    check_devices(client, [(a, "--learner-device", config.learner.learner_device) for a in placement.learners]
                  + [(a, "--inference-device", config.sampler.inference_device) for a in placement.inference],
                  placement.names)
    if check_memory:
        check_fits_cluster(config, spaces, workers)
    return placement
