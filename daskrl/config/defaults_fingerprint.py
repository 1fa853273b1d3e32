"""One digest of every default a run of an algorithm can train with, so that defaults frozen for the test tasks stay
frozen (docs/training.md, "How the defaults are chosen").

The test tasks of a family are run once, after its defaults are frozen; a default changed afterwards would leave the
test table describing code that no longer exists. The digest covers what decides how a run learns where the user
typed nothing but ``--env``, ``--algo``, ``--seed`` and the budget: the options' global defaults (every section but
the run's bookkeeping and the deployment), the algorithm's own defaults and actor, and for APPO every env family's
settings under both outcomes of each rule with the rule's threshold. ``benchmarks/learning_tasks.py`` records the
digest at the freeze; ``tests/unit/test_frozen_defaults.py`` fails when it moves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from daskrl.config.algo_options import ACTORS, ALGO_DEFAULTS
from daskrl.config.env_defaults import FAMILIES
from daskrl.config.options import SECTIONS
from daskrl.config.task_profile import FALLS_AT_ONCE_SHARE, TaskProfile

#: sections whose defaults shape learning (run: logging, checkpoints, budgets; deploy: where it runs; env: the id)
LEARNING_SECTIONS = ("sampler", "model", "learner", "policies", "algo")
#: options of those sections that do nothing at their defaults (a feature that is off until its option is given):
#: left out of the digest, so adding one does not void the test tables of runs that never give it
OFF_UNTIL_GIVEN = {"algo": ("dataset", "dataset_fraction", "online_after"),
                   "policies": ("frozen_opponent", "league", "league_main_exploiters", "league_league_exploiters",
                                "league_pfsp", "league_self_play", "league_snapshot_win_rate", "league_exploiter_resets",
                                "league_peers", "league_role")}
#: options only some algorithms read (the offline learners'): in those algorithms' digests alone, so adding one does
#: not void the test tables of runs of an algorithm that never reads it
READ_ONLY_BY = {"algo": {"iql_expectile": ("iql",), "iql_temperature": ("iql",), "iql_max_weight": ("iql",),
                         "cql_weight": ("cql",), "cql_actions": ("cql",), "actor_learning_rate": ("iql", "cql")}}
#: one profile of each kind the rules tell apart (a task that falls at once, and one that runs to its time limit)
_PROFILES = {"falls at once": TaskProfile(horizon=1000, random_length=20.0, terminated_share=1.0),
             "runs to its limit": TaskProfile(horizon=1000, random_length=1000.0, terminated_share=0.0)}


def learning_defaults(algo: str) -> dict[str, Any]:
    """What a run of ``algo`` takes from daskrl where the user gave no option, as plain data."""
    globals_ = {s: {name: value for name, value in dataclasses.asdict(SECTIONS[s]()).items()
                    if name not in OFF_UNTIL_GIVEN.get(s, ()) and algo in READ_ONLY_BY.get(s, {}).get(name, (algo,))}
                for s in LEARNING_SECTIONS}
    out: dict[str, Any] = {"global": globals_, "algo": ALGO_DEFAULTS.get(algo, {}), "actor": ACTORS.get(algo, {})}
    if algo == "appo":  # only APPO takes the env families' settings (docs/offpolicy.md)
        out["families"] = {f.name: {"pattern": f.pattern, **{kind: f.settings(p) for kind, p in _PROFILES.items()}}
                           for f in FAMILIES}
        out["falls_at_once_share"] = FALLS_AT_ONCE_SHARE
    return out


def fingerprint(algo: str) -> str:
    """A short digest of :func:`learning_defaults`: equal digests, equal defaults."""
    text = json.dumps(learning_defaults(algo), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
