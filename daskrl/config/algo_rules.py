"""What each algorithm of ``--algo`` combines with (checked with the other rules, before anything starts).

DQN and SAC act inline in the rollout workers (DQN epsilon-greedily, an epsilon per worker) and learn with one
feed-forward learner of one policy; the options they cannot use yet are refused with the fix in one line. The action
space (Discrete for DQN, Box for SAC) is checked once the env is probed: :func:`algo_space_problems`. SAC's actor is
a squashed Gaussian with a state-dependent std: :func:`apply_algo_model` sets those model options.
"""

from __future__ import annotations

from typing import Any


def algo_problems(config: Any, found: dict[str, str]) -> list[str]:
    """Options that do not fit the chosen ``--algo`` (none for appo)."""
    a = config.algo
    if found or a.algo == "appo":
        return []
    name, out = f"--algo {a.algo}", []
    unsupported = [
        (config.sampler.inference != "inline", "acts inline in the rollout workers (an epsilon per worker): use "
                                               "--inference inline"),
        (config.policies.num_policies > 1 or config.policies.self_play_snapshots > 0 or config.policies.pbt,
         "trains one policy: leave out --num-policies, --self-play-snapshots and --pbt"),
        (config.learner.num_learners > 1, "trains with one learner: use --num-learners 1"),
        (config.learner.sync, "is off-policy: leave out --sync"),
        (config.model.rnn != "none", "has no recurrent replay yet: leave out --rnn"),
        (config.learner.lr_schedule != "constant" or config.learner.optimizer != "adam" or config.learner.kl_coef > 0,
         "trains with Adam at a constant learning rate: leave out --lr-schedule, --optimizer and --kl-coef"),
        (a.algo == "sac" and "action_bounds" in config.explicit() and config.model.action_bounds != "squash",
         "squashes its Gaussian into the action box: leave out --action-bounds clip"),
        (a.algo == "sac" and "gaussian_std" in config.explicit() and config.model.gaussian_std != "state",
         "learns a state-dependent std: leave out --gaussian-std parameter"),
    ]
    out += [f"{name} {why}" for bad, why in unsupported if bad]
    if a.learning_starts > a.replay_capacity:
        out.append(f"--learning-starts {a.learning_starts} exceeds --replay-capacity {a.replay_capacity}: training "
                   "would never start (try --learning-starts 1000)")
    if a.replay_shards > config.sampler.num_workers:
        out.append(f"--replay-shards {a.replay_shards} is more than --num-workers {config.sampler.num_workers}: a "
                   "shard takes the slots of the rollout workers wired to it, so some would stay empty")
    return out


def algo_space_problems(algo: str, action_kinds: tuple[str, ...], action_kind: str) -> list[str]:
    """The env's action space against what the algorithm acts in."""
    if action_kind in action_kinds:
        return []
    return [f"--algo {algo} needs {' or '.join(action_kinds)} actions, and this env's are {action_kind}: use "
            "--algo appo"]


def apply_algo_model(config: Any) -> None:
    """The model options an algorithm needs (SAC: a squashed Gaussian whose std depends on the state), set before
    the run's config is saved, so samplers, the learner and ``enjoy`` build the same network."""
    if config.algo.algo == "sac":
        object.__setattr__(config.model, "action_bounds", "squash")  # not counted as set by the user
        object.__setattr__(config.model, "gaussian_std", "state")
