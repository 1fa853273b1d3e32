"""Every option of daskrl, defined once: typed dataclasses by section, whose help text also makes the CLI flags.

Field names are unique across sections, so the flag of `num_envs_per_worker` is `--num-envs-per-worker` whichever
section holds it. Each field's metadata also holds its allowed range or choices, so
:meth:`~daskrl.config.configuration.Config.validate` checks every value (type, finite, range, choices) from the
fields themselves (:mod:`.checks`): a new option is one edit.
"""

from __future__ import annotations

from dataclasses import dataclass

from daskrl.config.algo_options import MINARI_ID, AlgoConfig
from daskrl.config.deploy_options import DeployConfig
from daskrl.config.fields import Section, opt

#: values of ``--inference-precision``; samplers resolve 'auto' on their own host, since a cluster's CPUs may differ
INFERENCE_PRECISIONS = ("auto", "float32", "bfloat16")
#: where the APPO learner's value targets come from (daskrl/algo/appo/trajectory_minibatches.py)
TARGETS_FROM = ("auto", "batch", "minibatch")
#: why --targets-from minibatch and --rnn do not go together (refused when the config is checked, and by the trainer)
RECURRENT_MINIBATCH_TARGETS = ("--targets-from minibatch needs a feed-forward policy: a recurrent core (--rnn) takes "
                               "the states of its sequences from the pass over the whole batch; use --targets-from "
                               "batch (or auto)")
#: what --learner-device and --inference-device accept (daskrl.devices resolves them on the component's worker)
DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"
#: limits of the env seeding scheme (daskrl.envs.registry.env_seed packs worker and env index into one number)
MAX_ENVS_PER_WORKER = 2**16
MAX_ROLLOUT_WORKERS = 2**15


@dataclass
class EnvConfig(Section):
    env: str = opt("CartPole-v1", "gymnasium id, 'package.module:factory', or a name given to daskrl.register_env",
                   low=1)
    env_kwargs: dict = opt({}, "keyword arguments for the env constructor (JSON on the command line)")
    obs_keys: list[str] = opt([], "Dict observations: the keys to keep (default: every key with a fixed shape; "
                                  "the others are dropped with a note at start)")
    action_mask_key: str = opt("", "Dict observations: the key that masks invalid discrete actions (1 = allowed); "
                                   "default: 'action_mask' where the observations have it")
    env_packages: list[str] = opt([], "modules to import before the env is made, here and in every worker (as "
                                      "rl-zoo's --gym-packages): packages that register env ids on import, such as "
                                      "minigrid; a comma-separated list works too")
    env_backend: str = opt("gymnasium", "what steps the rollout workers' envs: 'gymnasium' (one env object each); "
                                        "'envpool' (a split's envs in one C++ call) for atari/<Game> and the "
                                        "gymnasium ids envpool shares (CartPole-v1, LunarLander-v3, HalfCheetah-v5, "
                                        "...; pip install 'daskrl[envpool]'); 'jax' (one jitted call) for the "
                                        "gymnasium ids gymnax shares (CartPole-v1, Acrobot-v1, Pendulum-v1, ...; pip "
                                        "install 'daskrl[jax]' and then pip install --no-deps gymnax)",
                           choices=["gymnasium", "envpool", "jax"])
    curriculum: list[str] = opt([], "a curriculum of env ids: the tasks that follow --env's, in order (one family "
                                    "with --env's spaces: MiniGrid-DoorKey-8x8-v0 MiniGrid-DoorKey-16x16-v0, or "
                                    "comma-separated); every env moves on to the next task when --curriculum-rule "
                                    "holds on the current one (docs/curriculum.md)")
    curriculum_tasks: list[str] = opt([], "a curriculum of tasks for --env's own set_task(task) (as RLlib's "
                                          "TaskSettableEnv), in order; each item is read as JSON where it parses "
                                          "('3', '{\"size\": 8}') and as text otherwise")
    curriculum_rule: str = opt("success>=0.9", "when a curriculum moves on: 'success>=X' (the share of episodes "
                                               "with a positive return, MiniGrid's success) or 'return>=X' (the mean "
                                               "return), over --curriculum-window episodes of the current task",
                               pattern=r"(success|return)>=-?[0-9]+(\.[0-9]*)?",
                               pattern_help="success>=X or return>=X, X a number")
    curriculum_window: int = opt(100, "episodes of the current task the curriculum rule is read over (the window "
                                      "must be full)", low=1)
    curriculum_replay: float = opt(0.0, "the share of episodes that replay an earlier task of the curriculum "
                                        "(drawn uniformly), to keep what was learned", low=0.0, high=1.0)


@dataclass
class SamplerConfig(Section):
    num_workers: int = opt(2, "rollout workers (one Dask worker process each)", low=1, high=MAX_ROLLOUT_WORKERS)
    num_envs_per_worker: int = opt(32, "envs stepped by each rollout worker", low=1, high=MAX_ENVS_PER_WORKER)
    worker_num_splits: int = opt(0, "groups of envs per rollout worker; must divide num_envs_per_worker. 2 = double "
                                    "buffering: one group steps while the other waits for remote inference. 0 = "
                                    "auto: 2 with --inference remote, 1 inline (one thread both steps and acts, so a "
                                    "second group would only halve the policy's batch)", low=0)
    rollout: int = opt(32, "env steps per trajectory slot (the unit the learner trains on)", low=1)
    slots_per_split: int = opt(3, "trajectory slots per split: more lets sampling run further ahead of the learner",
                               low=1)
    inference: str = opt("inline", "where the policy runs: 'inline' in the rollout worker (fast for cheap envs), "
                                   "or 'remote' in batched inference workers", choices=["inline", "remote"])
    num_inference_workers: int = opt(1, "inference workers per policy (inference='remote' only)", low=1)
    numpy_inference: bool = opt(True, "samplers run MLP policies with a numpy forward pass (the same function, "
                                      "about 2-4x faster than torch at these sizes); other models use torch")
    inference_precision: str = opt("auto", "number format of the sampling policy's encoder: 'bfloat16' runs it (an "
                                           "image policy's conv stack: nearly all of its cost) about 2x faster on "
                                           "CPUs with native bfloat16 (AVX512-BF16, AMX) and slower on others; "
                                           "heads, log-probs and values stay float32 and the learner trains in "
                                           "float32. 'auto': bfloat16 for image observations where the sampler's "
                                           "CPU has it, float32 otherwise",
                                     choices=list(INFERENCE_PRECISIONS))
    inference_device: str = opt("auto", "where remote inference workers run the policy: 'cpu', 'cuda', 'cuda:N', or "
                                        "'auto' (cuda where the inference worker's machine has one, else cpu); "
                                        "inline samplers always act on the CPU", pattern=DEVICE_PATTERN,
                                pattern_help="auto, cpu, cuda or cuda:N")
    info_keys: list[str] = opt([], "keys of the env's info dict to average per report when an episode ends (as "
                                   "'info/<key>' in the CSV, TensorBoard and the dashboard), besides what an env puts "
                                   "in info['episode_extra_stats']")
    env_failure_limit: int = opt(5, "an env that raises is rebuilt and its episode dropped; this many failures in a "
                                    "row of one env stop the run", low=0)
    param_relay: str = opt("auto", "how parameter versions reach hosts other than the learner's: 'auto' runs a relay "
                                   "on each such host that fetches every version once (told by a bus message) and "
                                   "writes it into that host's shared memory, where its samplers read it in place; "
                                   "'off': every sampler there polls the scheduler and pulls each version itself",
                           choices=["auto", "off"])

    def num_splits(self) -> int:
        """``worker_num_splits`` with 'auto' (0) resolved for the chosen inference strategy."""
        if self.worker_num_splits > 0:
            return self.worker_num_splits
        return 2 if self.inference == "remote" and self.num_envs_per_worker % 2 == 0 else 1


@dataclass
class ModelConfig(Section):
    encoder: str = opt("auto", "observation encoder: 'auto' (the Nature cnn for images of 36x36 pixels or more, "
                               "small_cnn for smaller ones, mlp otherwise), 'mlp', 'cnn', 'small_cnn', 'impala' (the "
                               "IMPALA ResNet: deeper, for Procgen and Atari), or a name given to "
                               "daskrl.models.register_encoder; with Dict observations it encodes the image keys",
                       low=1)
    key_encoders: dict = opt({}, "Dict observations: an encoder per key ({\"key\": \"name\"}, JSON on the command "
                                 "line); keys not named: images by --encoder, the rest concatenated into one MLP")
    hidden_sizes: list[int] = opt([64, 64], "hidden layer sizes of the MLP encoder", low=1)
    activation: str = opt("tanh", "MLP activation", choices=["tanh", "relu", "elu"])
    value_encoder: str = opt("auto", "what the value head reads: 'shared' (the policy's encoder's features: one "
                                     "trunk, half the encoder's cost), 'separate' (an encoder of its own, built as "
                                     "the policy's), or 'auto': separate MLPs for vector observations (CleanRL's "
                                     "PPO), shared for images and recurrent cores, and shared under --algo dqn (the "
                                     "dueling streams of one trunk, as Wang et al.) and sac (its actor never trains "
                                     "the value head)",
                             choices=["auto", "shared", "separate"])
    normalize_obs: bool = opt(True, "normalize observations with running mean/std (not for images; off by default "
                                       "under --algo dqn, as SB3's DQN: docs/offpolicy.md)")
    action_bounds: str = opt("clip", "continuous actions in a bounded Box: 'clip' sends the Gaussian sample clipped to "
                                     "the Box and trains on the probability of what was sent (the tails beyond a bound "
                                     "count as the bound); 'squash' maps it into the Box with tanh; 'squash_mean' "
                                     "squashes the mean with tanh and sends it plus the Gaussian's noise, clipped to "
                                     "the Box (TD3's exploration; --algo td3 sets it)",
                             choices=["clip", "squash", "squash_mean"])
    init_log_std: float = opt(0.0, "initial log standard deviation of a Gaussian policy (continuous actions)")
    gaussian_std: str = opt("parameter", "a Gaussian policy's standard deviation: 'parameter' (one learned log-std per "
                                         "action dimension, as CleanRL's PPO) or 'state' (a head on the features, "
                                         "log-std clamped to [-20, 2], as SAC; --algo sac sets it)",
                            choices=["parameter", "state"])
    rnn: str = opt("none", "recurrent core between the encoder and the heads (one core shared by the policy and "
                           "value heads, which then share one encoder too): 'lstm', 'gru', a name given to "
                           "daskrl.models.register_core, or 'none' (feed-forward)", low=1)
    rnn_size: int = opt(0, "hidden units of the recurrent core (0: 64 for vector observations, 256 for images)",
                        low=0)
    rnn_layers: int = opt(1, "stacked layers of the recurrent core", low=1, high=8)


@dataclass
class LearnerConfig(Section):
    learning_rate: float = opt(2e-3, "learning rate of the optimizer (--optimizer)", low=0, low_open=True)
    lr_schedule: str = opt("constant", "learning-rate schedule: 'constant'; 'linear' decays it over the step budget "
                                       "(--train-for-env-steps) down to 0.05x; 'kl_adaptive' (Sample Factory's) "
                                       "divides it by 1.5 after an epoch whose mean KL(behaviour || current policy) is "
                                       "above twice --lr-schedule-kl-threshold and multiplies it by 1.5 below half of "
                                       "it, within [--lr-adaptive-min, --lr-adaptive-max]",
                           choices=["constant", "linear", "kl_adaptive"])
    lr_schedule_kl_threshold: float = opt(0.008, "--lr-schedule kl_adaptive: the KL per sample it keeps the policy's "
                                                 "change near (the k3 estimate of --kl-coef)", low=0, low_open=True)
    lr_adaptive_min: float = opt(1e-6, "--lr-schedule kl_adaptive: the lowest learning rate it sets", low=0,
                                 low_open=True)
    lr_adaptive_max: float = opt(1e-2, "--lr-schedule kl_adaptive: the highest learning rate it sets", low=0,
                                 low_open=True)
    optimizer: str = opt("adam", "'adam'; 'adamw' (Adam with decoupled --weight-decay); 'lamb' (Adam's update scaled "
                                 "per parameter tensor by a trust ratio |weights| / |update|, with --weight-decay; "
                                 "You et al. 2019, for large batches)", choices=["adam", "adamw", "lamb"])
    weight_decay: float = opt(0.0, "decoupled weight decay of --optimizer adamw or lamb (0: none)", low=0)
    kl_coef: float = opt(0.0, "KL penalty: adds this x the mean KL(behaviour || current policy) per sample to the "
                              "loss, estimated from the taken actions' log-probs with the k3 estimator (r - 1) - "
                              "log r, r = pi/mu clamped to [0.05, 20] as the ratio is (unbiased, never negative; "
                              "0: off)", low=0)
    gamma: float = opt(0.99, "discount factor", low=0, high=1)
    gae_lambda: float = opt(0.95, "GAE lambda (advantage='gae')", low=0, high=1)
    advantage: str = opt("vtrace", "advantage estimator", choices=["vtrace", "gae"])
    vtrace_rho: float = opt(1.0, "V-trace rho-bar (importance-weight clip for the TD error)", low=0, low_open=True)
    vtrace_c: float = opt(1.0, "V-trace c-bar (importance-weight clip for the trace)", low=0, low_open=True)
    clip_ratio: float = opt(0.2, "PPO clip e: ratios are clipped to [1/(1+e), 1+e]", low=0, low_open=True)
    value_clip: float = opt(1.0, "value change clipped to +-value_clip per update (0 disables)", low=0)
    value_coef: float = opt(0.5, "value loss coefficient", low=0)
    entropy_coef: float = opt(0.0, "entropy bonus coefficient", low=0)
    max_grad_norm: float = opt(0.5, "gradient-norm clipping (0 disables)", low=0)
    batch_size: int = opt(512, "samples per SGD minibatch", low=1)
    num_batches_per_epoch: int = opt(4, "minibatches per training step (a step trains on batch_size x this many)",
                                     low=1)
    num_epochs: int = opt(1, "passes over each training step's data", low=1)
    targets_from: str = opt("auto", "where V-trace's (or GAE's) value targets and advantages come from: 'batch', one "
                                    "pass over the step's whole batch before its minibatches of shuffled steps; "
                                    "'minibatch', each minibatch's own pass, minibatches of whole trajectories "
                                    "(Sample Factory's way: one forward pass a sample fewer, targets of the weights "
                                    "being trained; --value-clip has nothing to clip against). 'auto': minibatch for "
                                    "feed-forward image policies, whose forward passes are the learner's cost, "
                                    "batch otherwise", choices=list(TARGETS_FROM))
    recurrence: int = opt(0, "with --rnn: steps of truncated backpropagation through time per sequence, from the "
                             "state stored at the start of each trajectory slot; must divide --rollout, and "
                             "--batch-size must hold whole sequences (0: the slot length, --rollout)", low=0)
    max_policy_lag: int = opt(20, "samples older than this many policy versions are masked out of the loss", low=0)
    normalize_advantages: bool = opt(True, "normalize advantages per minibatch")
    normalize_returns: bool = opt(True, "normalize value targets with running statistics")
    reward_scale: float = opt(1.0, "rewards are multiplied by this before training (episode returns stay raw)",
                              low=0, low_open=True)
    reward_clip: float = opt(0.0, "rewards (after --reward-scale) are clipped to +-this before training (0: no "
                                  "clipping)", low=0)
    sync: bool = opt(False, "synchronous training (exact on-policy PPO, for comparisons): a training step takes every "
                            "slot of every rollout worker, and sampling waits for its new version, so no sample is "
                            "ever older than the policy that trains on it")
    bootstrap_time_limits: bool = opt(True, "an episode cut by a time limit (truncated) bootstraps its last value "
                                            "from its real final observation instead of ending there as a death")
    learner_threads: int = opt(1, "torch threads in the learner process", low=1)
    learner_precision: str = opt("auto", "number format the learner runs the encoder in: 'bfloat16' trains an "
                                         "image policy's conv stack under bfloat16 autocast (weights, optimizer, "
                                         "heads, log-probs and losses stay float32), about 1.8x the samples/s of "
                                         "the Nature CNN learner on CPUs with native bfloat16 (AVX512-BF16, AMX) and "
                                         "slower on others. 'auto': bfloat16 for image observations on such a CPU, "
                                         "float32 otherwise (GPUs included)",
                                   choices=list(INFERENCE_PRECISIONS))
    learner_kernels: str = opt("auto", "'auto': the learner's hand-written fast paths (daskrl/algo/kernels/) where "
                                       "they apply; 'off': plain torch autograd, torch.optim Adam, no flat buffer "
                                       "(the reference the fast paths are tested against)", choices=["auto", "off"])
    learner_device: str = opt("auto", "where the learner trains: 'cpu', 'cuda', 'cuda:N', or 'auto' (cuda where the "
                                      "learner's worker has one, else cpu). A worker started with --resources GPU=1 "
                                      "gets the learner", pattern=DEVICE_PATTERN,
                              pattern_help="auto, cpu, cuda or cuda:N")
    num_learners: int = opt(1, "learners of the policy, one Dask worker each: data-parallel, each trains on its "
                               "share of every batch and the gradients are averaged (torch.distributed: gloo on CPU, "
                               "nccl on GPU)", low=1, high=64)
    nan_tolerance: int = opt(10, "training steps in a row with NaN/inf loss or gradients before the run stops",
                             low=1)


#: frozen past versions each league member keeps as league players, unless --self-play-snapshots says otherwise
LEAGUE_SNAPSHOTS = 4


@dataclass
class PolicyConfig(Section):
    num_policies: int = opt(1, "policies trained side by side, each with its own learner (one Dask worker), "
                               "parameters, checkpoints and logs", low=1, high=64)
    policy_mapping: str = opt("auto", "which policy acts for each agent: 'shared' (policy 0 for every agent), "
                                      "'round_robin' (agents, and episodes, spread over the policies), 'self_play' "
                                      "(one seat per env to a trained policy, the others to self-play snapshots), "
                                      "'module:function' (called as function(agent_id, episode_index) -> policy "
                                      "index), or 'auto' (league with --league, self_play with snapshots, "
                                      "round_robin with several policies, else shared)", low=1)
    self_play_snapshots: int = opt(0, "two-player envs: keep this many frozen past versions of policy 0 (of every "
                                      "member, with --league) as opponents (0: none; opponents are the other "
                                      "policies)", low=0, high=64)
    self_play_snapshot_every: int = opt(50, "policy versions between two self-play snapshots", low=1)
    frozen_opponent: str = opt("", "two-player games: the other seat of every game is the policy of this checkpoint "
                                   "(a .pt file, or a folder of checkpoints such as an experiment's "
                                   "checkpoints/policy_0), which never trains: train an exploiter of it, e.g. to "
                                   "measure how exploitable a league's main agent is (with it: --self-play-snapshots "
                                   "1)")
    league: bool = opt(False, "two-player games: train a league in the manner of AlphaStar's: main agents, main "
                              "exploiters and league exploiters (the --num-policies policies, by role), each keeping "
                              "--self-play-snapshots frozen past versions as league players, opponents drawn by "
                              "prioritized fictitious self-play from a payoff table (payoff.csv, Elo ratings); "
                              "defaults with it: --num-policies 3, --self-play-snapshots 4")
    league_main_exploiters: int = opt(1, "league members that train against the main agents only", low=0, high=16)
    league_league_exploiters: int = opt(1, "league members that train against every frozen player of the league",
                                        low=0, high=16)
    league_pfsp: str = opt("hard", "how main agents and league exploiters weigh an opponent they win against at rate "
                                   "p: 'hard' (1-p)^2, 'even' p(1-p), 'uniform' (fictitious self-play)",
                           choices=["hard", "even", "uniform"])
    league_self_play: float = opt(0.35, "share of a main agent's games against the current main agents (the rest "
                                        "by --league-pfsp over every player of the league)", low=0, high=1)
    league_snapshot_win_rate: float = opt(0.7, "a member adds a snapshot of itself to the league as soon as it wins "
                                               "this share of its recent games against its opponents (and at least "
                                               "every --self-play-snapshot-every versions)", low=0, high=1,
                                          low_open=True)
    league_exploiter_resets: bool = opt(True, "AlphaStar's exploiter resets: a main exploiter that adds a snapshot "
                                              "by --league-snapshot-win-rate trains on from fresh weights, a league "
                                              "exploiter does so with chance 0.25; main agents never")
    league_peers: list[str] = opt([], "a league of separate runs on one cluster (--scheduler): the other members' "
                                      "runs by their --experiment names; this run is one member (--league-role), "
                                      "plays their current policies and snapshots as league players and lets them "
                                      "play its own")
    league_role: str = opt("main", "this run's role in a league of separate runs (--league-peers)",
                           choices=["main", "main_exploiter", "league_exploiter"])
    pbt: bool = opt(False, "population-based training over the --num-policies policies (needs 2 or more)")
    pbt_period_env_steps: int = opt(200_000, "env steps (of the whole run) between two PBT rounds", low=1)
    pbt_replace_fraction: float = opt(0.25, "worst fraction of the population replaced in each PBT round",
                                      low=0, high=0.5, low_open=True)
    pbt_perturb_factor: float = opt(1.2, "a mutated hyperparameter is multiplied or divided by this", low=1,
                                    low_open=True)
    pbt_mutation_rate: float = opt(0.5, "chance that each hyperparameter of a replaced policy is mutated", low=0,
                                   high=1)

    def apply_opponent_defaults(self) -> None:
        """The sizes the user did not give: with --league one main agent beside the exploiters and 4 snapshots of
        each member, with --frozen-opponent the one snapshot that holds it. Set as an env family's defaults are
        (not counted as given), so that the user's win."""
        explicit = self.explicit()
        if self.league and "num_policies" not in explicit:  # a member run of a league of runs trains one policy
            object.__setattr__(self, "num_policies", 1 if self.league_peers
                               else 1 + self.league_main_exploiters + self.league_league_exploiters)
        if "self_play_snapshots" not in explicit and (self.league or self.frozen_opponent):
            object.__setattr__(self, "self_play_snapshots", LEAGUE_SNAPSHOTS if self.league else 1)


@dataclass
class RunConfig(Section):
    experiment: str = opt("", "experiment name (default: the env id and a timestamp)")
    train_dir: str = opt("train_dir", "directory that holds experiment directories", low=1)
    seed: int = opt(0, "base random seed (envs, model init)", low=0, high=2**32 - 1)
    train_for_env_steps: int = opt(1_000_000, "stop after this many env steps (0 = no limit)", low=0)
    train_for_seconds: float = opt(0.0, "stop after this many seconds (0 = no limit)", low=0)
    train_for_updates: int = opt(0, "offline algorithms (bc, iql, cql), which take no env steps: stop after this "
                                    "many learner updates (0 = no limit; their default: 100,000)", low=0)
    stop_at_return: float | None = opt(None, "stop once the mean return of the last --stop-window episodes reaches "
                                             "this (judged only once that many have finished)")
    stop_window: int = opt(100, "episodes in the mean return that --stop-at-return, the best checkpoint and the "
                                "reports use; neither the stop nor best.pt acts on fewer (the first episodes to end "
                                "are often the short ones)", low=1)
    resume: bool = opt(False, "continue the experiment from its latest checkpoint")
    env_defaults: bool = opt(True, "use the defaults of the env's family for the options you did not give (printed "
                                   "at start; families: Atari, Doom, MiniGrid, Taxi, Acrobot, MountainCar, MuJoCo, "
                                   "Pendulum, MPE, Box2D; docs/training.md lists their settings and the rules that "
                                   "derive some of them from the task)")
    serial: bool = opt(False, "run every component in this one process (worker threads instead of worker "
                              "processes): slower, but a debugger such as pdb can step through a slot")
    deterministic: bool = opt(False, "with --sync: the same flags and --seed give the same bytes (metrics.csv without "
                                     "its time columns, checkpoints): slots are trained in a fixed order, the learner "
                                     "holds each step until the driver has read the run at it, and a row is written "
                                     "per training step (docs/reproducibility.md)")
    record_schedule: bool = opt(False, "write the schedule of an asynchronous run into the experiment (which rollout "
                                       "worker filled each slot with which policy versions, the order the learner "
                                       "took them): `daskrl replay` re-executes it in one process and gives the same "
                                       "weights (docs/reproducibility.md)")
    overwrite: bool = opt(False, "start an existing experiment again from nothing: what its directory holds is "
                                 "removed first (without it, a new run refuses an existing experiment)")
    sampling_only: bool = opt(False, "sample without learning (measures the sampler's ceiling; with --init-checkpoint, "
                                     "samples that checkpoint's policy, as `daskrl record` does)")
    sampling_deterministic: bool = opt(False, "with --sampling-only: take the most likely action instead of sampling "
                                              "one (DQN and TD3 always do, as `daskrl enjoy` plays them)")
    sampling_epsilon: float = opt(0.0, "with --sampling-only: take a uniformly random action with this probability "
                                       "instead of the policy's (noise in a recorded dataset)", low=0, high=1)
    record_dataset: str = opt("", "write every whole episode the rollout workers play into this Minari dataset "
                                  "(NAMESPACE/ENV/NAME-vN, in $MINARI_DATASETS_PATH or ~/.minari/datasets; needs "
                                  "the datasets extra: pip install 'daskrl[datasets]'; docs/offline.md)",
                              pattern=MINARI_ID, pattern_help="a Minari dataset id such as mine/pendulum/expert-v0")
    record_episodes: int = opt(0, "with --record-dataset: stop once this many episodes are recorded, the first ones "
                                  "of every env in equal shares, so that short episodes are not favoured (0: record "
                                  "until the run stops)", low=0)
    report_interval: float = opt(2.0, "seconds between progress lines and CSV rows", low=0, low_open=True)
    checkpoint_interval: float = opt(30.0, "seconds between checkpoints", low=0, low_open=True)
    keep_checkpoints: int = opt(3, "checkpoints kept besides the best one", low=1)
    keep_checkpoint_every_env_steps: int = opt(0, "also keep, for good, the first checkpoint written after each "
                                                  "multiple of this many env steps (milestone_<steps>.pt; 0: none)",
                                               low=0)
    eval_interval_env_steps: int = opt(0, "every this many env steps, run --eval-episodes evaluation episodes with the "
                                          "newest weights on envs of their own in the driver, logged as "
                                          "eval_return_mean (0: no evaluation)", low=0)
    eval_interval_updates: int = opt(0, "offline algorithms: every this many learner updates, run --eval-episodes "
                                        "evaluation episodes as --eval-interval-env-steps does (0: no evaluation)",
                                     low=0)
    eval_episodes: int = opt(10, "episodes per evaluation (--eval-interval-env-steps, --eval-interval-updates)", low=1)
    eval_deterministic: bool = opt(True, "evaluation episodes (and videos) take the most likely action; "
                                         "--no-eval-deterministic samples actions as training does")
    save_video_every_env_steps: int = opt(0, "every this many env steps, record one episode of the newest policy to "
                                             "<experiment>/videos/video_<env steps>.mp4 (envs that render rgb_array; "
                                             "needs the video extra; 0: no videos)", low=0)
    wandb_project: str = opt("", "log the run to this Weights & Biases project: the scalars TensorBoard gets, the "
                                 "config and the --save-video-every-env-steps videos ('': no W&B; pip install "
                                 "'daskrl[wandb]'; WANDB_MODE=offline keeps the run on this machine for `wandb sync`); "
                                 "--resume continues the same W&B run", pattern=r"[^/\\#?%:]*",
                             pattern_help="a W&B project name (none of / \\ # ? % :)")
    wandb_entity: str = opt("", "the W&B user or team that owns --wandb-project (default: your W&B default entity)")
    wandb_name: str = opt("", "the W&B run's display name (default: the --experiment name)")
    wandb_group: str = opt("", "the W&B group of the run (runs compared together, such as a sweep's seeds)")
    wandb_job_type: str = opt("", "the W&B job type of the run (a further grouping, such as 'train')")
    wandb_tags: list[str] = opt([], "tags of the W&B run")
    log_level: str = opt("info", "which of the run's own lines the console shows: 'info' (what it starts, "
                                 "recovers and stops, the progress lines, warnings), 'warning' (warnings only), "
                                 "'error' (none: a failure is still the command's message), 'debug' (info, and the "
                                 "driver's records of daskrl's and Dask's loggers, which otherwise go only to "
                                 "<experiment>/daskrl.log)", choices=["debug", "info", "warning", "error"])
    init_checkpoint: str = opt("", "start a new experiment from the weights and observation/return statistics of "
                                   "this checkpoint file (or the latest checkpoint of this experiment directory, or "
                                   "of this bundle of daskrl publish); "
                                   "the optimizer starts afresh", pattern=r"\S.*", pattern_help="a path")
    scheduler: str = opt("", "address of an existing Dask scheduler (default: an embedded LocalCluster); a cluster "
                             "that uses TLS has a tls:// address and needs the three --tls-* files",
                         pattern=r"((tcp|tls|ws|wss|ucx|inproc)://)?(\[[0-9a-fA-F:.]+\]|[^\s/:\[\]]+)(:\d{1,5})?(/\S*)?",
                         pattern_help="an address such as tcp://host:8786 (protocols: tcp, tls, ws, wss, ucx)")
    tls_ca_file: str = opt("", "TLS: the CA certificate (PEM) that signed the cluster's certificates; with "
                               "--tls-cert/--tls-key every connection is encrypted and authenticated (an embedded "
                               "cluster then uses TLS too)", file=True)
    tls_cert: str = opt("", "TLS: this client's certificate (PEM), signed by --tls-ca-file", file=True)
    tls_key: str = opt("", "TLS: the private key (PEM) of --tls-cert (may be left out when the certificate file "
                           "holds the key)", file=True)
    connect_timeout: float = opt(10.0, "seconds an existing cluster's scheduler (--scheduler) gets to answer before "
                                       "the run gives up", low=0, low_open=True)
    n_dask_workers: int = opt(0, "worker processes of the embedded cluster (0 = as many as the run needs)", low=0)
    dashboard_address: str = opt(":8787", "where the embedded cluster serves the Dask dashboard ('' = any free port)",
                                 pattern=r"([\w.\-]*:\d{1,5})?", pattern_help="'', :port or host:port")
    elastic: bool | None = opt(None, "follow the cluster: a worker that joins gets a rollout worker (or an inference "
                                     "worker when inference is the bottleneck), a worker that leaves gracefully has "
                                     "its rollout workers drained first, and a rollout worker lost with no room "
                                     "left is not recreated until room appears (default: on with --scheduler or "
                                     "--adapt, off on a fixed embedded cluster)")
    max_rollout_workers: int = opt(0, "elastic runs grow to at most this many rollout workers (0: up to "
                                      f"{MAX_ROLLOUT_WORKERS:,})", low=0,
                                   high=MAX_ROLLOUT_WORKERS)
    adapt: str = opt("", "MIN:MAX: the embedded (or --deploy) cluster adapts between MIN and MAX worker processes "
                         "(Dask's adaptive scaling), asking for workers while more rollout workers would help; "
                         "implies --elastic",
                     pattern=r"\d+:\d+", pattern_help="MIN:MAX worker counts, such as 2:8")
    max_learner_restarts: int = opt(3, "a lost learner restarts from the newest checkpoint at most this many times",
                                    low=0)
    heartbeat_timeout: float = opt(10.0, "a component whose loop has not turned for this many seconds is reported "
                                         "as silent, with its current stack", low=0, low_open=True)
    share_workers: bool = opt(False, "place this run's components on workers other runs on the cluster use too "
                                     "(by default a run takes only workers no other run holds; its name on the "
                                     "cluster is its --experiment)")
    wait_for_workers: float = opt(0.0, "when the cluster's free workers are too few for this run, wait this many "
                                       "seconds for other runs to free theirs before refusing (0: refuse at once)",
                                  low=0)


SECTIONS = {"env": EnvConfig, "sampler": SamplerConfig, "model": ModelConfig, "learner": LearnerConfig,
            "policies": PolicyConfig, "run": RunConfig, "algo": AlgoConfig, "deploy": DeployConfig}
