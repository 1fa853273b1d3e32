"""Which Dask worker runs which busy component: one busy component per worker process.

Roles are pinned through Dask worker resources where the user set them (a worker started with
``--resources learner=1`` gets the learner; ``rollout=1`` and ``inference=1`` likewise); the remaining roles
take the remaining workers in name order. Too few workers is a configuration error, found before anything
is created.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from daskrl.config import Config
from daskrl.errors import ConfigError


class Role(enum.Enum):
    """What a component does in a run; the fleet knows its components by role, never by class name."""

    LEARNER = "learner"
    ROLLOUT = "rollout"
    INFERENCE = "inference"
    SINK = "sink"


ROLES = ("learner", "rollout", "inference")  # the roles that need a worker process of their own


@dataclass
class Placement:
    learner: str | None
    rollout: list[str]
    inference: list[str]
    names: dict[str, str] = field(default_factory=dict)  # address -> worker name (stable across restarts)


def role_counts(config: Config) -> dict[str, int]:
    s = config.sampler
    return {"learner": 0 if config.run.sampling_only else 1, "rollout": s.num_workers,
            "inference": s.num_inference_workers if s.inference == "remote" else 0}


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
            "workers or lower --num-workers / --num-inference-workers"
        ])
    order = sorted(workers, key=lambda a: (str(workers[a].get("name", a)), a))
    free = list(order)
    chosen: dict[str, list[str]] = {role: [] for role in ROLES}
    for role in ROLES:  # pinned first
        for address in order:
            if len(chosen[role]) < counts[role] and address in free and workers[address].get("resources", {}).get(role):
                chosen[role].append(address)
                free.remove(address)
    for role in ROLES:
        pinned = [a for a in free if any(workers[a].get("resources", {}).get(r) for r in ROLES if r != role)]
        for address in [a for a in free if a not in pinned] + pinned:
            if len(chosen[role]) >= counts[role]:
                break
            chosen[role].append(address)
            free.remove(address)
    return Placement(chosen["learner"][0] if chosen["learner"] else None, chosen["rollout"], chosen["inference"],
                     {a: str(workers[a].get("name", a)) for a in workers})
