"""Defaults per env family: the settings a family needs to learn, used where the user left an option at its default.

The global defaults are tuned for cheap discrete envs (CartPole solves in seconds). Continuous control is another
regime: a few thousand steps per second, dense rewards that need normalizing, on-policy updates that need many
passes over little data. As Sample Factory's per-env overrides do, a family sets what differs; an option the user
gave (on the command line, in a config file, or by assigning it) always wins, and ``--no-env-defaults`` keeps the
global ones. The run prints the family's settings at start. Each family's numbers are measured in
docs/performance.md (``benchmarks/bench_learning.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daskrl.config.checks import as_option
from daskrl.config.configuration import Config
from daskrl.config.options import SECTIONS
from daskrl.config.task_profile import TaskProfile


@dataclass(frozen=True)
class EnvFamily:
    name: str
    pattern: str  # a regular expression the env id must match in full (a "module:" prefix is ignored)
    options: dict[str, Any]
    #: settings derived from a property of the task (its profile, measured before the run: TaskProfile), over
    #: ``options``; None: the family has no such rule
    rules: Callable[[TaskProfile], dict[str, Any]] | None = None

    def settings(self, profile: TaskProfile | None) -> dict[str, Any]:
        """What the family sets for a task with this profile (without one, the rules are left out)."""
        derived = self.rules(profile) if self.rules is not None and profile is not None else {}
        return {**self.options, **derived}


#: rl-zoo's PPO recipe for classic control, run synchronously: 4,096 samples per update (16 envs x 256 steps) in
#: minibatches of 64, 4 passes, GAE
_RL_ZOO_CLASSIC = {"num_workers": 1, "num_envs_per_worker": 16, "rollout": 256, "batch_size": 64,
                   "num_batches_per_epoch": 64, "num_epochs": 4, "advantage": "gae", "learning_rate": 3e-4,
                   "sync": True}

#: what both MuJoCo families share: one rollout worker (the learner is the bottleneck), GAE, a linearly decaying
#: learning rate of 3e-4, no value clipping
_MUJOCO_COMMON = {"num_workers": 1, "slots_per_split": 2, "advantage": "gae", "learning_rate": 3e-4,
                  "lr_schedule": "linear", "value_clip": 0.0}

#: CleanRL's PPO recipe for continuous control (2,048 samples per update in 32 minibatches of 64, 10 passes, a
#: [64, 64] tanh policy starting wide, log std 0, GAE with gamma 0.99 and lambda 0.95), run synchronously: what a
#: MuJoCo task that falls at once gets (TaskProfile.falls_at_once: random actions end its episodes by termination
#: within 5% of the time limit). Why: staying up pays a reward every step, and a narrow initial policy (the family's
#: log std -2) settles on standing still. Measured with bench_learning.py (1M steps): with the family's settings
#: Hopper-v5 learned to stand still (return ~1,000, also with gamma 0.999 / GAE 0.99, small minibatches, entropy or
#: --sync); with these it evaluated at 1,710-3,263 over seeds 0-2 (rl-zoo: 2,410 on v3). Ant, whose random episodes
#: last 15% of the limit, keeps the family's settings (110% of rl-zoo's)
_FALLS_AT_ONCE = {"num_envs_per_worker": 8, "rollout": 256, "batch_size": 64, "num_batches_per_epoch": 32,
                  "num_epochs": 10, "sync": True, "hidden_sizes": [64, 64], "activation": "tanh", "init_log_std": 0.0,
                  "gamma": 0.99, "gae_lambda": 0.95}


def _falls_at_once(profile: TaskProfile) -> dict[str, Any]:
    return dict(_FALLS_AT_ONCE) if profile.falls_at_once else {}


#: VizDoom (daskrl/envs/suites/doom.py): image observations make the learner the bottleneck on a CPU, so each sample
#: counts: smaller training steps (1,024 samples in 4 minibatches of 256) come more often, the learning rate is
#: Adam's usual one for a CNN, and a small entropy bonus keeps the policy exploring (Sample Factory uses an
#: exploration loss of 0.001 over many more samples)
_DOOM = {"num_envs_per_worker": 8, "batch_size": 256, "learning_rate": 3e-4, "entropy_coef": 0.01}

#: Atari (daskrl/envs/suites/atari.py: 84x84x4 frames, the Nature CNN). Steps of 1,024 samples (4 minibatches of 256, one
#: pass; a second pass costs 2.3x per sample) come every half second or so, from the global 2 rollout workers x 32
#: envs. Until the learner grew faster (bench_learner.py: ~960 samples/s on one thread then, ~4,000-4,600 now) one
#: rollout worker fed one learner thread, a core each; then a single worker left the learner's core two-thirds idle
#: (1,500 env steps/s with 1 x 32, 1,929 with 2 x 16, bench_atari.py --only daskrl --seconds 120 at 58904f1). Once
#: ALE was stepped directly (AleFrames, 23% faster sampling), the policy's forward pass weighed more in a step, and
#: batches of 32 beat 16: 2,102 and 2,129 trained env steps/s against 1,960 and 1,926 (the same command, two runs
#: each in turn, at 1a74e30), for about 70 MB more PSS. The rest is the PPO Atari recipe of Sample Factory and
#: CleanRL: learning rate 2.5e-4, clip 0.1, entropy bonus 0.01, rewards clipped to +-1 for training (logged returns
#: stay the game's score)
_ATARI = {"batch_size": 256, "learning_rate": 2.5e-4, "clip_ratio": 0.1, "entropy_coef": 0.01, "reward_clip": 1.0}

FAMILIES: tuple[EnvFamily, ...] = (
    EnvFamily("Atari", r"atari/\w+", _ATARI),
    # Sample Factory scales these two scenarios' rewards (kills are worth about 100) by 0.01; here only the training
    # rewards are scaled, the logged returns stay the game's
    EnvFamily("Doom (basic, deadly corridor)", r"doom/(basic|deadly_corridor)", {**_DOOM, "reward_scale": 0.01}),
    EnvFamily("Doom", r"doom/\w+", _DOOM),
    # measured on MiniGrid-DoorKey-5x5-v0 (300 s, one run each): with the global defaults (no entropy bonus) the
    # policy reached 0.96, became deterministic (entropy 0.01) and collapsed to 0 at 200 s for good; with an entropy
    # bonus of 0.01 (rl-starter-files' value for MiniGrid) it reached 0.96 at 100 s and stayed there to the end
    EnvFamily("MiniGrid", r"(BabyAI|MiniGrid)-[\w-]+-v\d+", {"entropy_coef": 0.01}),
    # measured on Taxi-v4 (one-hot states, daskrl/envs/layouts/index_obs.py; 1M env steps): with the global defaults the
    # policy learned within 200k steps never to pick up or drop off (a wrong try costs 10) and stayed at -200 (no
    # delivery in 200 steps), as it did with an entropy bonus of 0.01 or 0.05, a learning rate of 3e-4 alone, or 4
    # passes alone (seed 0). 128-step slots, 4 passes and 3e-4 reached 7.6 with seed 0 but stayed at -200 with seed 1;
    # with an entropy bonus of 0.01 too, seeds 0 and 2 reached 7.5 and 8.2 by 1M, seed 1 -46 at 800k in one run and
    # -177 at 1M in another (asynchronous runs differ). SB3's PPO defaults, seed 0: 6.2 at 300k. FrozenLake keeps the
    # global defaults (0.7 by 350k; with 128-step slots, 4 passes and 3e-4, 0.5 at 800k)
    EnvFamily("Taxi", r"Taxi-v\d+", {"rollout": 128, "num_epochs": 4, "learning_rate": 3e-4, "entropy_coef": 0.01}),
    # measured with bench_learning.py (1M steps, seeds 0-1, 100 deterministic episodes): Acrobot-v1 evaluated at
    # -76.3 and -74.9 (rl-zoo: -73.5), MountainCar-v0 at -98.8 and -99.9 (rl-zoo: -110.4); with the global defaults
    # -87.3 / -79.5 and -131.8 / -134.2. For Acrobot a linear learning-rate decay (-80.7, -82.7) and a [256, 256]
    # network (-77.8, -73.0) did not do better
    EnvFamily("Acrobot", r"Acrobot-v\d+", {**_RL_ZOO_CLASSIC, "gae_lambda": 0.94}),
    EnvFamily("MountainCar", r"MountainCar-v\d+", {**_RL_ZOO_CLASSIC, "gae_lambda": 0.98}),
    # measured with bench_learning.py (1M steps): with a narrow initial policy (log std -2), ReLU and gamma 0.98 /
    # GAE 0.92 (rl-zoo's choices for HalfCheetah) HalfCheetah-v5 evaluated at 6,451 (rl-zoo: 5,819 on v3); the first
    # guess (log std 0, tanh, 0.99 / 0.95) reached 3,338. A sweep across the family (examples/sweep_mujoco_family.yaml:
    # gamma 0.98 / 0.999 x log std -2 / -0.5 on HalfCheetah, Hopper, Ant, Swimmer, by normalized score) kept these:
    # HalfCheetah 6,065 and Ant 1,455 (rl-zoo: 1,327) at 1M; Swimmer reached 60 with gamma 0.9999 (rl-zoo: 282).
    # Tasks that fall at once (the rule, _falls_at_once) get CleanRL's recipe instead
    EnvFamily("MuJoCo", r"(HalfCheetah|Hopper|Walker2d|Ant|Humanoid|HumanoidStandup|Swimmer|Reacher|Pusher|"
                        r"InvertedPendulum|InvertedDoublePendulum)-v\d+", {
                            **_MUJOCO_COMMON, "num_envs_per_worker": 16, "rollout": 64, "hidden_sizes": [256, 256],
                            "activation": "relu", "init_log_std": -2.0, "batch_size": 256, "num_epochs": 10,
                            "gamma": 0.98, "gae_lambda": 0.92, "max_policy_lag": 100},
              rules=_falls_at_once),
    # measured with bench_learning.py (100k steps, seeds 0-5): --sync and gamma 0.95 made Pendulum reproducible and
    # reach rl-zoo's -172 (evaluation median -165); asynchronous with gamma 0.9, the medians were -250 to -400; its
    # learning rate stays 1e-3 where the global one (tuned for cheap discrete envs) moved to 2e-3
    EnvFamily("Pendulum", r"Pendulum-v\d+", {
        "num_workers": 1, "num_envs_per_worker": 16, "rollout": 64, "slots_per_split": 2, "gamma": 0.95,
        "learning_rate": 1e-3, "batch_size": 256, "num_epochs": 10, "advantage": "gae", "sync": True}),
    # measured with bench_learning.py (1M steps, seed 0): LunarLander-v3 evaluated at 283 (rl-zoo: 242 on v2) with
    # rl-zoo's recipe (4,096 samples per update in minibatches of 64, 4 passes) run synchronously; at 195 with two
    # asynchronous workers and minibatches of 512
    # measured on mpe2's simple_spread_v3 (shared policy, 300 s, one run): with the global defaults the mean return
    # stayed where a random policy's is (-27.7) or below; with episode-long slots (25 steps, the env's max_cycles),
    # 10 passes over each step's data at 7e-4 (MAPPO's MPE settings) and an entropy bonus of 0.01 it rose to -12.8;
    # measured with 8 minibatches a step, which it keeps where the global default moved to 4
    EnvFamily("MPE (PettingZoo)", r"mpe2?\.simple\w*(:\w+)?", {
        "rollout": 25, "num_batches_per_epoch": 8, "num_epochs": 10, "learning_rate": 7e-4, "entropy_coef": 0.01}),
    EnvFamily("Box2D", r"(LunarLander|LunarLanderContinuous|BipedalWalker|BipedalWalkerHardcore)-v\d+", {
        **_RL_ZOO_CLASSIC, "gamma": 0.999, "gae_lambda": 0.98, "entropy_coef": 0.01}),
)


#: options a family sets to leave room for the learner (fewer rollout workers): not applied to sampling-only runs,
#: which measure the sampler alone
_LEARNER_ROOM = frozenset({"num_workers"})


def family_of(env: str) -> EnvFamily | None:
    """The family of an env id, or None (the global defaults apply). A ``module:`` prefix is ignored, unless the
    whole spec is what the family names (a factory such as ``mpe2.simple_spread_v3:parallel_env``)."""
    env_id = env.rsplit(":", 1)[-1]
    return next((f for f in FAMILIES if re.fullmatch(f.pattern, env_id) or re.fullmatch(f.pattern, env)), None)


def _section_of(name: str) -> str:
    return next(s for s, cls in SECTIONS.items() if name in {f.name for f in cls.__dataclass_fields__.values()})


def family_in_force(config: Config) -> EnvFamily | None:
    """The env's family when its settings apply: --env-defaults on, and APPO (the families were tuned with it)."""
    return family_of(config.env.env) if config.run.env_defaults and config.algo.algo == "appo" else None


def apply_env_defaults(config: Config, profile: TaskProfile | None = None) -> dict[str, Any]:
    """Set the family's options that the user did not set; returns them (name -> value). Idempotent. The families'
    settings are APPO's (tuned and measured with it): another ``--algo`` keeps the global defaults. ``profile``: the
    task's (:func:`daskrl.envs.task_probe.profile_task`), for a family whose rules read it."""
    family = family_in_force(config)
    if family is None:
        return {}
    explicit = config.explicit()
    applied = {}
    for name, value in family.settings(profile).items():
        if name in _LEARNER_ROOM and config.run.sampling_only:
            continue  # it leaves a core to the learner, and a sampling-only run has none
        if name not in explicit:
            object.__setattr__(getattr(config, _section_of(name)), name, value)  # not counted as set by the user
            applied[name] = value
    return applied


def needs_profile(config: Config) -> bool:
    """Whether the env's family has rules that read the task's profile (the driver measures it then)."""
    family = family_in_force(config)
    return family is not None and family.rules is not None


def describe(config: Config, profile: TaskProfile | None = None) -> str:
    """One line naming the family's settings in force for this run ('' when none)."""
    applied = apply_env_defaults(config, profile)
    if not applied:
        return ""
    family = family_of(config.env.env)
    shown = " ".join(as_option(k, v) for k, v in applied.items())
    return (f"defaults for {family.name} envs: {shown} (options you give win; --no-env-defaults keeps the global "
            "defaults)")
