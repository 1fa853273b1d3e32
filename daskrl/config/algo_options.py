"""The algorithms' options (:class:`AlgoConfig`: ``--algo`` and what the off-policy and offline learners read) and
what each algorithm combines with (checked with the other rules, before anything starts), as the deployment's options
and rules live together in :mod:`.deploy_options`.

DQN and SAC act inline in the rollout workers (DQN epsilon-greedily, an epsilon per worker) and learn with one
feed-forward learner of one policy; the options they cannot use yet are refused with the fix in one line. The action
space (Discrete for DQN, Box for SAC) is checked once the env is probed: :func:`algo_space_problems`. SAC's actor is
a squashed Gaussian with a state-dependent std: :func:`apply_algo_model` sets those model options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daskrl.config.checks import as_option
from daskrl.config.fields import Section, opt

#: a Minari dataset id (NAMESPACE/ENV/NAME-vN; the namespace parts are optional, the version is not)
MINARI_ID = r"([\w.-]+/)?([\w.-]+/)?[\w.-]+-v\d+"

#: the algorithms of ``--algo`` and where each one's learner takes its data ("fresh slots" or "replay"), which decides
#: the rules it is checked by (daskrl/driver/fleet/algorithms.py names what each one is made of; its
#: ``register_algorithm`` adds one here, so this dict is also the option's choices)
ALGO_SOURCES: dict[str, str] = {"appo": "fresh slots", "dqn": "replay", "sac": "replay", "td3": "replay",
                                "bc": "replay", "iql": "replay", "cql": "replay"}
#: the algorithms that train from --dataset alone: an offline run has no rollout workers, its replay shards hold only
#: the dataset and serve as fast as the learner asks, and its progress is counted in learner updates
#: (--train-for-updates), not env steps (``register_algorithm`` adds one registered with ``offline=True``)
OFFLINE_ALGOS: set[str] = {"bc", "iql", "cql"}


@dataclass
class AlgoConfig(Section):
    algo: str = opt("appo", "the algorithm: 'appo' (on-policy, V-trace; rollout workers' slots go to the learner), "
                            "'dqn' (off-policy, Discrete actions), 'sac' or 'td3' (off-policy, Box actions): for "
                            "these three slots go to replay shards and the learner draws minibatches from them; "
                            "offline, from --dataset alone (no env steps, docs/offline.md): 'bc' (behaviour "
                            "cloning), 'iql' (implicit Q-learning, Box actions), 'cql' (conservative Q-learning, "
                            "Box actions)",
                    choices=ALGO_SOURCES)
    replay_shards: int | str = opt("auto", "off-policy: replay shards, each holding in shared memory the transitions "
                                           "of the rollout workers wired to it. 'auto': one per host that runs "
                                           "rollout workers, beside the first of them; each rollout worker hands its "
                                           "slots to its own host's shard, and an elastic run adds a shard on each "
                                           "host that joins. A number: that many, fixed (shard j beside rollout "
                                           "worker j, rollout worker i hands its slots to shard i mod N)",
                                    low=1, high=1024, pattern="auto", pattern_help="'auto' or a number of shards")
    replay_capacity: int = opt(100_000, "off-policy: transitions kept in all by the shards the run starts with, "
                                        "split evenly over them (the oldest are overwritten); a shard added later "
                                        "(a host that joins, under --replay-shards auto) gets the same share, so "
                                        "the total grows with the hosts", low=1)
    learning_starts: int = opt(1_000, "off-policy: transitions held before the learner trains (split evenly over the "
                                      "shards the run starts with; a shard added later waits for the same share): "
                                      "no over-training of a nearly empty buffer", low=0)
    replay_ratio: float = opt(0.25, "off-policy: minibatch updates per env step collected (the update-to-data ratio; "
                                    "a shard serves no more draws than this allows, so a fast learner waits for data)",
                              low=0, low_open=True)
    replay_batches_per_request: int = opt(0, "off-policy: minibatches a replay shard may serve per learner request "
                                             "(the learner trains them one after another and sends their priorities "
                                             "back at once; the ratio still decides how many are served). 0 = auto: "
                                             "the updates one trajectory slot allows, at most 16", low=0, high=64)
    prioritized_replay: bool = opt(True, "off-policy: draw transitions in proportion to |TD error|^alpha (with "
                                         "importance weights), not uniformly")
    priority_alpha: float = opt(0.6, "prioritized replay: the priority exponent (0: uniform)", low=0)
    priority_beta: float = opt(0.4, "prioritized replay: the importance-weight exponent (1: fully corrected)",
                               low=0, high=1)
    n_step: int = opt(3, "off-policy: rewards summed before bootstrapping (n-step returns)", low=1, high=1000)
    target_update_interval: int = opt(500, "dqn: minibatch updates between two copies of the online network into "
                                           "the target network", low=1)
    double_q: bool = opt(True, "dqn: the online network picks the bootstrap action, the target network rates it")
    dueling: bool = opt(True, "dqn: Q = V + A - mean(A) from the model's value and action heads; without it the "
                              "action head's outputs are the Q-values")
    exploration_eps: float = opt(0.05, "dqn: the epsilon of epsilon-greedy exploration that rollout worker 0 ends "
                                       "at; worker i of N ends at eps^(1 + exploration_alpha i / (N - 1)) (Ape-X's "
                                       "scheme, which uses 0.4 over hundreds of actors)", low=0, high=1)
    exploration_alpha: float = opt(7.0, "dqn: the spread of the rollout workers' epsilons (see --exploration-eps)",
                                   low=0)
    checkpoint_replay: bool = opt(False, "off-policy: each checkpoint also saves every shard's transitions and "
                                         "priorities under <experiment>/replay/ (large: 84x84x4 frames take 56 KB a "
                                         "transition), and --resume refills the shards from them; the shards' "
                                         "workers must see the experiment directory (one host, or a shared file "
                                         "system)")
    target_tau: float = opt(0.005, "sac, td3: the target networks move this fraction of the way to the online ones "
                                   "after each update (td3: each actor update)", low=0, high=1, low_open=True)
    policy_delay: int = opt(2, "td3: critic updates per actor (and target) update", low=1)
    target_policy_noise: float = opt(0.2, "td3: the std of the noise on the target actor's action, in half-widths "
                                          "of the action box (target policy smoothing)", low=0)
    target_noise_clip: float = opt(0.5, "td3: that noise is clipped to +-this many half-widths", low=0)
    init_alpha: float = opt(1.0, "sac: the entropy temperature alpha at the start (it is then tuned to keep the "
                                 "policy's entropy near -action_dim)", low=0, low_open=True)
    exploration_fraction: float = opt(0.1, "dqn: each worker's epsilon falls linearly from 1 to its own over this "
                                           "fraction of --train-for-env-steps (0: from the start)", low=0, high=1)
    dataset: str = opt("", "off-policy: preload the replay shards with this Minari dataset (minari:NAMESPACE/ENV/"
                           "NAME-vN, in $MINARI_DATASETS_PATH or ~/.minari/datasets; the shards' workers must see it), "
                           "split by episode over the shards; every minibatch then takes --dataset-fraction of its "
                           "rows from it and the rest from new experience (RLPD's symmetric sampling; "
                           "docs/offline.md)",
                       pattern=f"minari:{MINARI_ID}",
                       pattern_help="minari: and a Minari dataset id, such as minari:mine/pendulum/expert-v0")
    dataset_fraction: float = opt(0.5, "with --dataset: the share of every minibatch drawn from the dataset (RLPD's "
                                       "0.5; the rest comes from the run's own experience)", low=0, high=1)
    online_after: int = opt(0, "sac, td3, dqn with --dataset: train this many learner updates from the dataset "
                               "alone first (offline: nothing sampled), then start the rollout workers and draw "
                               "--dataset-fraction of each minibatch from the dataset, the rest from new experience "
                               "(0: sample from the start)", low=0)
    iql_expectile: float = opt(0.7, "iql: the expectile tau the state value V(s) regresses min Q(s, a) at (Kostrikov et "
                                    "al. 2021's MuJoCo setting; 0.5: the mean, towards 1: the best dataset action)",
                               low=0, high=0.999, low_open=True)
    iql_temperature: float = opt(3.0, "iql: the inverse temperature beta of the actor's advantage-weighted regression, "
                                      "weights exp(beta (Q - V)) (Kostrikov et al. 2021's MuJoCo setting)", low=0)
    iql_max_weight: float = opt(100.0, "iql: those weights are clipped at this (the official code's 100)",
                                low=0, low_open=True)
    cql_weight: float = opt(5.0, "cql: the weight of the conservative penalty on each critic (Kumar et al. 2020's "
                                 "official code, gym MuJoCo, without Lagrange tuning)", low=0)
    cql_actions: int = opt(10, "cql: actions of each kind (uniform in the box, the policy's at s, at s') the "
                               "penalty's log-sum-exp takes per state (the official code's 10)", low=1, high=1000)
    actor_learning_rate: float = opt(0.0, "iql, cql: the actor's (and cql's temperature's) learning rate, kept as its "
                                          "ratio to --learning-rate under --lr-schedule; 0: --learning-rate itself "
                                          "(cql's paper: 1e-4 beside the critics' 3e-4)", low=0)


def algo_problems(config: Any, found: dict[str, str]) -> list[str]:
    """Options that do not fit the chosen ``--algo``: those an algorithm that trains on replay cannot use yet (none
    for one that trains on fresh slots, as APPO does)."""
    a = config.algo
    if found:
        return []
    if ALGO_SOURCES[a.algo] != "replay":
        return [f"--dataset preloads the replay shards of an off-policy algorithm, and --algo {a.algo} has none: "
                "use --algo sac, td3 or dqn (or an offline one: bc, iql, cql)"] if a.dataset else []
    name, out = f"--algo {a.algo}", []
    unsupported = [
        (config.sampler.inference != "inline", "acts inline in the rollout workers (an epsilon per worker): use "
                                               "--inference inline"),
        (config.policies.num_policies > 1 or config.policies.self_play_snapshots > 0 or config.policies.pbt
         or config.policies.league, "trains one policy: leave out --num-policies, --self-play-snapshots, --pbt and "
                                    "--league"),
        (config.learner.num_learners > 1, "trains with one learner: use --num-learners 1"),
        (config.learner.sync, "is off-policy: leave out --sync"),
        (a.algo in OFFLINE_ALGOS and a.online_after > 0,
         "trains from the dataset alone throughout: --online-after is for --algo sac, td3 or dqn with --dataset"),
        (config.model.rnn != "none", "has no recurrent replay yet: leave out --rnn"),
        (config.learner.lr_schedule == "kl_adaptive" or config.learner.optimizer != "adam"
         or config.learner.kl_coef > 0,
         "trains with Adam, at a constant or linearly decaying learning rate: leave out --lr-schedule kl_adaptive, "
         "--optimizer and --kl-coef"),
        (a.algo in ACTORS and "action_bounds" in config.explicit()
         and config.model.action_bounds != ACTORS[a.algo]["action_bounds"],
         f"bounds its actions as --action-bounds {ACTORS.get(a.algo, {}).get('action_bounds')} does: leave out "
         f"--action-bounds {config.model.action_bounds}"),
        (a.algo == "sac" and "gaussian_std" in config.explicit() and config.model.gaussian_std != "state",
         "learns a state-dependent std: leave out --gaussian-std parameter"),
        (a.algo == "td3" and "gaussian_std" in config.explicit() and config.model.gaussian_std != "parameter",
         "explores with one fixed noise (--init-log-std): leave out --gaussian-std state"),
        (a.algo in OFFLINE_ALGOS and a.algo in ACTORS and "gaussian_std" in config.explicit()
         and config.model.gaussian_std != ACTORS[a.algo]["gaussian_std"],
         f"learns with --gaussian-std {ACTORS.get(a.algo, {}).get('gaussian_std')}: leave out --gaussian-std"),
    ]
    out += [f"{name} {why}" for bad, why in unsupported if bad]
    if a.algo in OFFLINE_ALGOS:
        return out + offline_problems(config)
    if a.learning_starts > a.replay_capacity:
        out.append(f"--learning-starts {a.learning_starts} exceeds --replay-capacity {a.replay_capacity}: training "
                   "would never start (try --learning-starts 1000)")
    if isinstance(a.replay_shards, int) and a.replay_shards > config.sampler.num_workers:
        out.append(f"--replay-shards {a.replay_shards} is more than --num-workers {config.sampler.num_workers}: a "
                   "shard takes the slots of the rollout workers wired to it, so some would stay empty")
    return out


def offline_problems(config: Any) -> list[str]:
    """What an offline algorithm (trained from --dataset alone) cannot use: a run with no dataset, and the options
    that count env steps or act on sampled episodes (nothing is sampled: progress is counted in learner updates)."""
    a, r, explicit = config.algo, config.run, config.explicit()
    name = f"--algo {a.algo}"
    if not a.dataset:
        return [f"{name} trains from a dataset alone: give --dataset minari:ID (`daskrl record` writes one from a "
                "trained policy; docs/offline.md)"]
    counted_in_env_steps = [
        ("train_for_env_steps" in explicit, "--train-for-env-steps", "--train-for-updates (or --train-for-seconds)"),
        (r.eval_interval_env_steps > 0, "--eval-interval-env-steps", "--eval-interval-updates"),
        (r.keep_checkpoint_every_env_steps > 0, "--keep-checkpoint-every-env-steps", "--checkpoint-interval"),
        (r.save_video_every_env_steps > 0, "--save-video-every-env-steps", "`daskrl enjoy --save-video` after it"),
    ]
    out = [f"{name} takes no env steps, so {flag} never comes: use {fix}" for bad, flag, fix in counted_in_env_steps
           if bad]
    samples = [("dataset_fraction" in explicit, "--dataset-fraction (every row comes from the dataset)"),
               (bool(r.record_dataset), "--record-dataset (nothing is sampled to record)"),
               (r.sampling_only, "--sampling-only"), (bool(r.elastic or r.adapt), "--elastic and --adapt (an "
                                                                                  "offline run has no rollout "
                                                                                  "workers to grow)")]
    return out + [f"{name} samples nothing: leave out {what}" for bad, what in samples if bad]


def online_budget_problems(config: Any) -> list[str]:
    """The options that count learner updates belong to the offline algorithms: an online run's budget is in env
    steps."""
    if config.algo.algo in OFFLINE_ALGOS:
        return []
    r = config.run
    return [f"{flag} counts the updates of an offline algorithm (--algo {', '.join(sorted(OFFLINE_ALGOS))}): use "
            f"{fix} for --algo {config.algo.algo}" for flag, given, fix in
            (("--train-for-updates", r.train_for_updates, "--train-for-env-steps"),
             ("--eval-interval-updates", r.eval_interval_updates, "--eval-interval-env-steps")) if given]


def algo_space_problems(algo: str, action_kinds: tuple[str, ...], action_kind: str, bounded: bool = True) -> list[str]:
    """The env's action space against what the algorithm acts in (``bounded``: a Box with finite bounds everywhere;
    SAC and TD3 squash into it, and TD3's warm-up draws from it)."""
    if action_kind not in action_kinds:
        return [f"--algo {algo} needs {' or '.join(action_kinds)} actions, and this env's are {action_kind}: use "
                "--algo appo"]
    if algo in ACTORS and action_kind == "box" and not bounded:
        return [f"--algo {algo} squashes its actions into the action Box, and this env's Box has an infinite bound: "
                "give the env finite bounds (a gymnasium.wrappers.ClipAction over a bounded Box), or use --algo appo"]
    return []


#: smaller slots than APPO's 32 envs x 32 steps: the update-to-data ratio holds back sampling a slot at a time, so a
#: rollout worker's pool of slots (3 per split) is how far sampling may run ahead of the learner
_OFF_POLICY_SLOTS = {"num_envs_per_worker": 8, "rollout": 16}
#: how DQN learns where the user gave no option, chosen on the off-policy tuning tasks (CartPole-v1 at 50k env
#: steps, MountainCar-v0 at 120k, LunarLander-v3 at 100k; benchmarks/learning_tasks.py), 5 seeds each, judged by the
#: worst seed (docs/training.md, "How the defaults are chosen"): rl-zoo's 256x256 network and its middle values of
#: the per-env settings it passes (minibatches of 128, 0.5 updates per env step, exploration over a fifth of the
#: budget), the target network refreshed every 250 updates (rl-zoo: every 128-300). With the earlier defaults
#: (64x64, minibatches of 64, 0.25 updates per step, a target every 500 updates, exploration over a tenth) CartPole
#: evaluated at 128-246 on seeds 0-3; with these, 497-500 on seeds 0-4, and MountainCar -97 to -108. The rate decays
#: linearly over the budget (to 0.05x): at a constant 2e-3 some CartPole runs collapsed in their last tenth (one
#: evaluated at 500 over 10 episodes at 46k env steps and at 164 over 100 at 50k; 2 of 8 runs ended below 475),
#: and with the decay 5 of 5 ended at 500 (docs/training.md, "Off-policy")
_DQN_LEARNING = {"hidden_sizes": [256, 256], "batch_size": 128, "replay_ratio": 0.5, "target_update_interval": 250,
                 "exploration_fraction": 0.2, "lr_schedule": "linear"}
#: how SAC learns where the user gave no option, chosen on Pendulum-v1 at 20k env steps (the off-policy tuning task
#: with a Box action space): uniform replay and learning from the 100th transition, as SB3's SAC, and rl-zoo's
#: Pendulum learning rate (bench_learning passed it per env before): seeds 0-4 evaluated at -137 to -152 over 100
#: episodes each (the line: -200; SB3's SAC beside them in the same run: -133 to -161)
_SAC_LEARNING = {"prioritized_replay": False, "learning_starts": 100, "learning_rate": 1e-3}
#: how TD3 learns where the user gave no option: rl-zoo's TD3 for every env it tuned (uniform replay, a [400, 300]
#: network, minibatches of 256, one update per env step, a learning rate of 1e-3, 10,000 uniformly random steps
#: before learning: UniformWarmup) and its exploration noise (normal, 0.1 of the largest action): a log-std of ln 0.1,
#: which the actor's loss never moves, added after the tanh (``--action-bounds squash_mean``). With SB3's 100 steps and
#: the noise under the tanh, the actor's tanh saturated on HalfCheetah-v5 within 15k steps (every action at a bound,
#: -600: the control cost) and stayed there, since a saturated tanh passes no gradient
_TD3_LEARNING = {"prioritized_replay": False, "learning_starts": 10_000, "learning_rate": 1e-3,
                 "init_log_std": -2.302585, "hidden_sizes": [400, 300], "batch_size": 256}
#: how the offline algorithms learn where the user gave no option: one-step transitions drawn uniformly from the
#: dataset only, no observation normalization, two layers of 256 (the IQL paper's MuJoCo networks, d3rlpy's
#: default), minibatches of 256 and 100,000 updates. The rates are the papers': IQL 3e-4 for every network (Kostrikov
#: et al. 2021, appendix B; the paper's cosine decay of the actor's rate is --lr-schedule linear's job here); CQL 3e-4
#: for the critics and 1e-4 for the actor (Kumar et al. 2020's code for gym MuJoCo); BC 1e-3 (d3rlpy's BC)
_OFFLINE = {"n_step": 1, "prioritized_replay": False, "normalize_obs": False,
            "activation": "relu", "hidden_sizes": [256, 256], "batch_size": 256, "max_grad_norm": 0.0,
            "value_encoder": "shared", "train_for_updates": 100_000}
#: what an off-policy algorithm trains with where the user gave no option: the shared defaults are APPO's (a
#: 512-sample minibatch, tanh, gradient clipping at 0.5); these are SB3's and rl-zoo's usual ones for each.
#: DQN and TD3 do not normalize observations (SB3's do not either): the learner's running statistics count every
#: replayed draw (each transition about replay_ratio x batch_size times), so they settle on what the first, random
#: steps saw, and the +-5 std clip then hides the states found later. On MountainCar the clip fell at x = 0.03
#: after the 23k random steps, so the flag (x = 0.5) and the hill below it were one input (docs/offpolicy.md).
#: DQN's dueling streams (the value and action heads) read one trunk, as Wang et al.'s: with APPO's separate MLPs
#: every Q-value costs two encoders, and the update made 1.6x fewer steps a second (docs/performance.md). SAC's
#: actor never trains its value head: a tower of its own for it would only be published and checkpointed.
ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    "dqn": {**_OFF_POLICY_SLOTS, **_DQN_LEARNING, "activation": "relu", "max_grad_norm": 10.0,
            "normalize_obs": False, "value_encoder": "shared"},
    "sac": {**_OFF_POLICY_SLOTS, **_SAC_LEARNING, "batch_size": 256, "activation": "relu",
            "hidden_sizes": [256, 256], "max_grad_norm": 0.0, "n_step": 1, "replay_ratio": 1.0,
            "value_encoder": "shared"},
    "td3": {**_OFF_POLICY_SLOTS, **_TD3_LEARNING, "activation": "relu", "max_grad_norm": 0.0, "n_step": 1,
            "replay_ratio": 1.0, "normalize_obs": False, "value_encoder": "shared"},
    "bc": {**_OFFLINE, "learning_rate": 1e-3},
    "iql": {**_OFFLINE, "learning_rate": 3e-4},
    "cql": {**_OFFLINE, "learning_rate": 3e-4, "actor_learning_rate": 1e-4},
}
#: what each continuous off-policy algorithm's actor must be (set whatever the user gave: the rules refuse another
#: value given explicitly): SAC's std depends on the state; TD3's is one log-std its loss never moves (its noise)
ACTORS = {"sac": {"action_bounds": "squash", "gaussian_std": "state"},
          "td3": {"action_bounds": "squash_mean", "gaussian_std": "parameter"},
          # IQL's policy in its paper's code for MuJoCo: a tanh-squashed mean, a state-independent std; BC's the same
          # (its mode is the action it regresses); CQL's is SAC's
          "bc": {"action_bounds": "squash_mean", "gaussian_std": "parameter"},
          "iql": {"action_bounds": "squash_mean", "gaussian_std": "parameter"},
          "cql": {"action_bounds": "squash", "gaussian_std": "state"}}


def apply_algo_model(config: Any) -> dict[str, Any]:
    """Set the options an algorithm needs (SAC's actor: a squashed Gaussian whose std depends on the state) and its
    defaults (:data:`ALGO_DEFAULTS`) where the user gave none, before the run's config is saved, so samplers, the
    learner and ``enjoy`` build the same network; returns the defaults applied (name -> value)."""
    explicit, applied = config.explicit(), {}
    wanted = {**ALGO_DEFAULTS.get(config.algo.algo, {}), **ACTORS.get(config.algo.algo, {})}
    for name, value in wanted.items():
        if name in explicit:
            continue
        section = next(getattr(config, s) for s in ("sampler", "learner", "model", "algo", "run")
                       if hasattr(getattr(config, s), name))
        object.__setattr__(section, name, list(value) if isinstance(value, list) else value)  # not set by the user
        applied[name] = value
    return applied


def describe_algo_defaults(config: Any) -> str:
    """One line naming the off-policy defaults in force for this run ('' for appo, or when the user gave them all)."""
    explicit = config.explicit()
    shown = {name: value for name, value in ALGO_DEFAULTS.get(config.algo.algo, {}).items() if name not in explicit}
    if not shown:
        return ""
    flags = " ".join(as_option(name, v) for name, v in shown.items())
    return f"defaults for --algo {config.algo.algo}: {flags} (options you give win)"

