"""The PBT controller: a component that holds the population's PBT state and decides each round.

Why a component: it is the one place that owns the round counter and the random generator (seeded from the run's
seed), so decisions replay from a seed and stay in one order however the runner polls; like the others it is
created with a frozen setup and driven through async control methods. It moves no weights: the runner, which
holds every learner's handle, calls :meth:`PBTController.round` every ``--pbt-period-env-steps``, and for each
decision exports the source learner's training state and imports it into the target's (see daskrl/pbt/population.py).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from daskrl.config import Config
from daskrl.pbt.population import Exploit, PBTRanges, PBTRound, spread
from daskrl.runtime.actors.component import Component

#: decisions kept for :meth:`PBTController.stats` (the CSV keeps them all)
_HISTORY = 100


@dataclass(frozen=True)
class PBTSetup:
    """What the controller decides with: the run's seed and PBT options, and the number of its first round."""

    seed: int
    num_policies: int
    replace_fraction: float
    perturb_factor: float
    mutation_rate: float
    first_round: int  # 1 for a new run; after a resume, the round after the last one in pbt.csv
    ranges: PBTRanges


def pbt_setup(config: Config, first_round: int) -> PBTSetup:
    """The controller's setup for this run (``first_round``: ``PBTLog.last_round() + 1``)."""
    p = config.policies
    return PBTSetup(config.run.seed, p.num_policies, p.pbt_replace_fraction, p.pbt_perturb_factor,
                    p.pbt_mutation_rate, first_round, PBTRanges())


class PBTController(Component):
    """See the module docstring."""

    def on_configure(self, setup: PBTSetup) -> None:
        # a resumed run draws on from another point than the first: it does not repeat its earlier rounds' draws
        self.rng = random.Random(f"daskrl-pbt:{setup.seed}:{setup.first_round}")
        self.next_round = setup.first_round
        self.history: deque[dict] = deque(maxlen=_HISTORY)
        self.exploits = 0

    async def round(self, env_steps: int, returns_by_policy: dict[int, float | None],
                    hyperparams_by_policy: dict[int, dict[str, float]]) -> list[dict]:
        """Decide the next round: the replacements (:meth:`daskrl.pbt.population.Exploit.as_dict`, worst first) for the
        runner to carry out. ``returns_by_policy``: each policy's recent mean return (None: no finished episode yet);
        ``hyperparams_by_policy``: every policy's current hyperparameters (``Learner.hyperparams``)."""
        s = self.setup
        returns = {int(k): v for k, v in returns_by_policy.items()}
        hyperparams = {int(k): dict(v) for k, v in hyperparams_by_policy.items()}
        decided = PBTRound(self.next_round, int(env_steps), s.ranges).decide(
            returns, hyperparams, s.replace_fraction, s.perturb_factor, s.mutation_rate, self.rng)
        self.next_round += 1
        out = [e.as_dict() for e in decided]
        self.history.extend(out)
        self.exploits += len(out)
        self.counters["pbt_rounds"] += 1
        return out

    async def initial_hyperparams(self, base: dict[str, float]) -> dict[int, dict[str, float]]:
        """A new run's starting hyperparameters per policy (:func:`daskrl.pbt.population.spread`): policy 0 keeps ``base``,
        the others start mutated. Not for a resumed run: its checkpoints hold each policy's values."""
        s = self.setup
        return spread(base, s.num_policies, s.perturb_factor, s.mutation_rate, self.rng, s.ranges)

    def extra_stats(self) -> dict[str, Any]:
        return {"pbt": {"next_round": self.next_round, "exploits": self.exploits, "recent": list(self.history)}}


def exploits_of(decisions: list[dict]) -> list[Exploit]:
    """The runner's side: :meth:`PBTController.round`'s reply as :class:`~daskrl.pbt.population.Exploit` records."""
    return [Exploit.from_dict(d) for d in decisions]
