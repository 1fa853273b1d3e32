"""Population-based training (Jaderberg et al., 2017): what one round decides, and its log.

Every ``--pbt-period-env-steps`` the policies are ranked by their recent mean return; each of the worst
``ceil(fraction * N)`` copies the whole training state of a randomly chosen one of the best as many (exploit) and
trains on with that policy's hyperparameters, each multiplied or divided by ``--pbt-perturb-factor`` with
probability ``--pbt-mutation-rate`` (explore). Everything here is pure (given a seeded ``random.Random``), so the
rules are tested without a cluster; :mod:`daskrl.pbt.controller` runs it as a component and the runner moves the
weights (``Learner.export_training_state`` / ``Learner.import_training_state``).

Rules that keep a round safe to apply in any order: a policy with no finished episode yet is neither ranked nor
replaced; the best and the worst sets never overlap (so no policy is copied from while it is being replaced); a
policy is only replaced by one whose return is strictly higher (never by itself; ties replace nothing).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from daskrl.config.hyperparams import MUTABLE

#: a relative slack for ``ceil(fraction * N)``: 0.3 * 10 is 3.0000000000000004 in floating point, not 4
_CEIL_SLACK = 1e-9


@dataclass(frozen=True)
class Range:
    """Where PBT may move one hyperparameter. ``complement``: mutate ``1 - value`` instead (gamma), so steps are
    relative to the horizon and the value never reaches 1. Multiplying or dividing by a factor is a step of
    constant size on a log scale, which suits values spanning decades (the learning rate)."""

    low: float
    high: float
    complement: bool = False

    def clip(self, value: float) -> float:
        return min(max(value, self.low), self.high)


@dataclass(frozen=True)
class PBTRanges:
    """The declared range of each hyperparameter PBT mutates (the names of :data:`MUTABLE`)."""

    learning_rate: Range = Range(1e-5, 1e-2)
    entropy_coef: Range = Range(0.0, 0.1)
    clip_ratio: Range = Range(0.05, 0.5)
    gamma: Range = Range(0.9, 0.9999, complement=True)

    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self))

    def __getitem__(self, name: str) -> Range:
        if name not in self.names():
            raise KeyError(f"no PBT range for {name!r} (ranges: {', '.join(self.names())})")
        return getattr(self, name)


def perturb(value: float, name: str, factor: float, rng: random.Random, ranges: PBTRanges | None = None) -> float:
    """``value`` multiplied or divided by ``factor`` (a fair coin), then clipped into its range; for gamma the
    same on ``1 - gamma``. A value outside the range (a config's) lands in it; 0 stays 0 (so an entropy
    coefficient that starts at 0 is never explored: start it above 0 for PBT to move it)."""
    r = (ranges or PBTRanges())[name]
    up = rng.random() < 0.5
    if not r.complement:
        return r.clip(value * factor if up else value / factor)
    rest = max(1.0 - value, 0.0)
    rest = min(max(rest * factor if up else rest / factor, 1.0 - r.high), 1.0 - r.low)
    return r.clip(1.0 - rest)  # clipped again: 1 - (1 - 0.9999) may round above 0.9999


def mutate(hyperparams: Mapping[str, float], factor: float, mutation_rate: float, rng: random.Random,
           ranges: PBTRanges | None = None) -> tuple[dict[str, float], tuple[str, ...]]:
    """A copy of ``hyperparams`` with each one that has a range perturbed with probability ``mutation_rate``;
    and the names drawn for perturbation (drawn in the ranges' order: a seed gives the same draws)."""
    ranges = ranges or PBTRanges()
    out, drawn = {k: float(v) for k, v in hyperparams.items()}, []
    for name in ranges.names():
        if name in out and rng.random() < mutation_rate:
            out[name] = perturb(out[name], name, factor, rng, ranges)
            drawn.append(name)
    return out, tuple(drawn)


def spread(base: Mapping[str, float], num_policies: int, factor: float, mutation_rate: float, rng: random.Random,
           ranges: PBTRanges | None = None) -> dict[int, dict[str, float]]:
    """Starting hyperparameters for a new population (as Sample Factory does): policy 0 keeps ``base`` (the
    config's) as a reference, the others start mutated, so the first round already has differences to select."""
    out = {0: {k: float(v) for k, v in base.items()}}
    for policy in range(1, num_policies):
        out[policy] = mutate(base, factor, mutation_rate, rng, ranges)[0]
    return out


@dataclass(frozen=True)
class Exploit:
    """One replacement: ``target`` continues from ``source``'s training state with hyperparameters ``after``
    (``before``: what ``target`` trained with until now; ``mutated``: the names perturbed from ``source``'s)."""

    round: int
    env_steps: int
    target: int
    source: int
    target_return: float
    source_return: float
    before: dict[str, float]
    after: dict[str, float]
    mutated: tuple[str, ...]

    def as_dict(self) -> dict:
        """Plain values (for a Dask reply, a log line, JSON)."""
        out = dataclasses.asdict(self)
        out["mutated"] = list(self.mutated)
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> Exploit:
        return cls(**{**data, "mutated": tuple(data.get("mutated", ()))})


def _has_return(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


@dataclass(frozen=True)
class PBTRound:
    """Round ``number`` (1, 2, ...), held at ``env_steps`` env steps of the run."""

    number: int
    env_steps: int
    ranges: PBTRanges = PBTRanges()

    def decide(self, returns_by_policy: Mapping[int, float | None],
               hyperparams_by_policy: Mapping[int, Mapping[str, float]], fraction: float, factor: float,
               mutation_rate: float, rng: random.Random) -> list[Exploit]:
        """The replacements of this round (see the module docstring). ``hyperparams_by_policy`` names the whole
        population (N); ``returns_by_policy`` the recent mean return of each policy that has one (None, NaN or
        absent: none yet)."""
        population = sorted(hyperparams_by_policy)
        strays = sorted(set(returns_by_policy) - set(population))
        if strays:
            raise ValueError(f"returns for policies {strays} without hyperparameters (the population is {population})")
        returns = {p: float(r) for p in population if _has_return(r := returns_by_policy.get(p))}
        ranked = sorted(returns, key=lambda p: (-returns[p], p))  # best first; ties by index, so a seed replays
        count = min(math.ceil(fraction * len(population) - _CEIL_SLACK), len(ranked) // 2)
        if count <= 0:
            return []
        best, worst = ranked[:count], ranked[-count:]
        out = []
        for target in worst:
            sources = [s for s in best if returns[s] > returns[target]]
            if not sources:
                continue  # a tie with every one of the best: nothing better to copy
            source = rng.choice(sources)
            after, mutated = mutate(hyperparams_by_policy[source], factor, mutation_rate, rng, self.ranges)
            out.append(Exploit(self.number, int(self.env_steps), target, source, returns[target], returns[source],
                               {k: float(v) for k, v in hyperparams_by_policy[target].items()}, after, mutated))
        return out


class PBTLog:
    """``<experiment>/pbt.csv``, one row per replacement (appended and flushed as it happens: PBT events are rare),
    and the console line of each."""

    FILE = "pbt.csv"

    def __init__(self, experiment_dir: str, names: tuple[str, ...] = MUTABLE, started: float | None = None) -> None:
        """``started``: the run's start (``time.time()``), which ``time_s`` counts from (default: now)."""
        self.path = os.path.join(experiment_dir, self.FILE)
        self.names = names
        self.started = time.time() if started is None else started

    @property
    def columns(self) -> list[str]:
        return ["time_s", "env_steps", "round", "target", "source", "target_return", "source_return"] + \
            [f"{n}_{when}" for n in self.names for when in ("before", "after")]

    def write(self, exploit: Exploit | Mapping, time_s: float | None = None) -> None:
        """Append one replacement (``time_s``: seconds into the run; default: since ``started``)."""
        e = exploit if isinstance(exploit, Exploit) else Exploit.from_dict(exploit)
        new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        when = time.time() - self.started if time_s is None else time_s
        row = [f"{when:.3f}", e.env_steps, e.round, e.target, e.source, f"{e.target_return:.6g}",
               f"{e.source_return:.6g}"]
        for name in self.names:  # repr: the exact value, as the checkpoint holds it
            row += [repr(e.before.get(name, math.nan)), repr(e.after.get(name, math.nan))]
        with open(self.path, "a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(self.columns)
            writer.writerow(row)

    def last_round(self) -> int:
        """The last round in the file (0: none yet), so a resumed run numbers its rounds on."""
        if not os.path.exists(self.path):
            return 0
        with open(self.path, newline="") as f:
            return max((int(row["round"]) for row in csv.DictReader(f) if row.get("round")), default=0)

    def line(self, exploit: Exploit | Mapping) -> str:
        """One console line, e.g. ``daskrl: PBT round 3: policy 2 (return 85.0) <- policy 0 (return 412.3);
        learning_rate 0.001 -> 0.00083, ...``."""
        e = exploit if isinstance(exploit, Exploit) else Exploit.from_dict(exploit)
        changes = ", ".join(f"{n} {e.before.get(n, math.nan):.6g} -> {e.after.get(n, math.nan):.6g}"
                            for n in self.names)
        return (f"daskrl: PBT round {e.round}: policy {e.target} (return {e.target_return:.1f}) <- policy "
                f"{e.source} (return {e.source_return:.1f}); {changes}")
