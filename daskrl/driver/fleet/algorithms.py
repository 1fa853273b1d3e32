"""The algorithms of ``--algo``: each one object that names what it is made of.

An algorithm is three choices, made once when the run is set up:

- its **sampler-side policy**: how rollout workers act around the policy they hold (APPO and SAC sample their
  stochastic policy, SAC's a squashed Gaussian; DQN acts epsilon-greedily with an epsilon per rollout worker; TD3
  acts uniformly at random for its share of --learning-starts, :mod:`daskrl.sampling.policies.exploration`);
- its **data source**: the batcher's fresh slots (full slots announced to the learner, trained on once) or replay
  (slots announced to replay shards, :mod:`daskrl.replay.shard`, which keep transitions and serve draws);
- its **trainer** (``trainer_path``: a ``PolicyTrainer`` that its learner builds with ``from_options``, never asking
  which algorithm it trains), inside its learner component (:class:`~daskrl.learning.learner.Learner` for fresh
  slots, :class:`~daskrl.learning.replay_learner.ReplayLearner` for replay).

APPO's path is the one it always had: no exploration wrapper, no shards, the same learner. An algorithm of daskrl's
own is one entry here, its trainer in ``daskrl/algo/``, a learner component if its data source needs one, and its
rules in ``daskrl/config/algo_options.py``; one of a user's package is its folder and one :func:`register_algorithm`
call there (docs/offpolicy.md, "Adding an algorithm").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daskrl.config import Config
from daskrl.config.algo_options import ALGO_SOURCES, OFFLINE_ALGOS
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.lazy_names import class_at
from daskrl.setups import EpsilonGreedy, UniformWarmup


def samples_its_policy(config: Config, spaces: EnvSpaces, index: int, run_env_steps: int) -> None:
    """The policy's own stochastic actions: no exploration of the sampler's."""
    return None


def epsilon_greedy(config: Config, spaces: EnvSpaces, index: int, run_env_steps: int) -> EpsilonGreedy:
    """Rollout worker ``index``'s epsilon (Ape-X's per-actor scheme, with a decay: see --exploration-eps), created
    once the run took ``run_env_steps``."""
    a = config.algo
    return EpsilonGreedy.for_worker(index, config.sampler.num_workers, a.exploration_eps, a.exploration_alpha,
                                    a.exploration_fraction, config.run.train_for_env_steps, int(spaces.num_actions),
                                    run_env_steps)


def uniform_warmup(config: Config, spaces: EnvSpaces, index: int, run_env_steps: int) -> UniformWarmup:
    """Rollout worker ``index``'s uniformly random first steps: its share of what is left of --learning-starts once
    the run took ``run_env_steps`` (TD3)."""
    return UniformWarmup.for_worker(config.algo.learning_starts, config.sampler.num_workers, list(spaces.low or []),
                                    list(spaces.high or []), run_env_steps)


@dataclass(frozen=True)
class Algorithm:
    name: str
    #: rollout worker ``index``'s exploration setup, for a worker created once the run took some env steps (None:
    #: act as the policy samples)
    sampler_policy: Callable[[Config, EnvSpaces, int, int], EpsilonGreedy | UniformWarmup | None]
    data_source: str  # "fresh slots" or "replay": which learner component holds its trainer (LEARNERS)
    #: its trainer (a PolicyTrainer built with ``from_options``) as "module:class", handed to the learner in its setup
    trainer_path: str
    action_kinds: tuple[str, ...]  # the action spaces it can act in (EnvSpaces.action_kind)
    #: its policy is evaluated by its most likely action whatever ``enjoy`` is asked (a Q-network's head holds
    #: advantages, not a distribution to sample)
    acts_greedily: bool = False
    #: it trains from --dataset alone: no rollout workers, shards that hold only the dataset and serve as fast as
    #: the learner asks, progress in learner updates (--train-for-updates)
    offline: bool = False

    @property
    def uses_replay(self) -> bool:
        return self.data_source == "replay"

    @property
    def learner(self) -> Any:
        """The learner component of its data source, imported now (the driver's checks name algorithms without
        importing torch: the learners are imported where the fleet creates them)."""
        return class_at(LEARNERS[self.data_source])


#: where a learner can take its data, and the learner component that takes it there
LEARNERS = {"fresh slots": "daskrl.learning.learner:Learner", "replay": "daskrl.learning.replay_learner:ReplayLearner"}

ALGORITHMS = {
    "appo": Algorithm("appo", samples_its_policy, "fresh slots",
                      "daskrl.algo.appo.trainer:APPOTrainer", ("discrete", "multi_discrete", "box", "composite")),
    "dqn": Algorithm("dqn", epsilon_greedy, "replay", "daskrl.algo.dqn.trainer:DQNTrainer",
                     ("discrete",), acts_greedily=True),
    "sac": Algorithm("sac", samples_its_policy, "replay", "daskrl.algo.sac.trainer:SACTrainer",
                     ("box",)),
    # TD3's samplers act uniformly for --learning-starts, then with the policy's noise; its evaluation takes the
    # deterministic action (the mode)
    "td3": Algorithm("td3", uniform_warmup, "replay", "daskrl.algo.td3.trainer:TD3Trainer",
                     ("box",), acts_greedily=True),
    # the offline algorithms: nothing samples during their runs (their sampler policy is never asked for); their
    # evaluation and enjoy take the most likely action, as the papers evaluate them
    "bc": Algorithm("bc", samples_its_policy, "replay", "daskrl.algo.bc.trainer:BCTrainer",
                    ("discrete", "box"), acts_greedily=True, offline=True),
    "iql": Algorithm("iql", samples_its_policy, "replay", "daskrl.algo.iql.trainer:IQLTrainer",
                     ("box",), acts_greedily=True, offline=True),
    "cql": Algorithm("cql", samples_its_policy, "replay", "daskrl.algo.cql.trainer:CQLTrainer",
                     ("box",), acts_greedily=True, offline=True),
}


def algorithm_of(config: Config) -> Algorithm:
    return ALGORITHMS[config.algo.algo]


def register_algorithm(algorithm: Algorithm) -> None:
    """Make ``algorithm`` one of ``--algo``'s choices in this process (the run's driver: the learner imports the
    trainer by its path, so only that module must be importable on the workers). Its data source decides the rules
    it is checked by; registering a name again with another record is refused."""
    if algorithm.data_source not in LEARNERS:
        raise ValueError(f"algorithm {algorithm.name!r}: data_source must be one of {', '.join(LEARNERS)}, got "
                         f"{algorithm.data_source!r}")
    if ALGORITHMS.get(algorithm.name, algorithm) != algorithm:
        raise ValueError(f"an algorithm named {algorithm.name!r} is registered already: give yours another name")
    ALGORITHMS[algorithm.name] = algorithm
    ALGO_SOURCES[algorithm.name] = algorithm.data_source
    if algorithm.offline:
        OFFLINE_ALGOS.add(algorithm.name)
