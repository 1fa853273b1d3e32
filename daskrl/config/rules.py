"""Checks across options: values each fine alone that do not fit together (splits and envs, learners and batch
sizes, devices, elastic runs, recurrent sequences). Each problem is one line that names the options and a value that
would work. Nothing here imports user code: the names that must be registered components (after --env-packages are
imported) are checked in the driver's preflight (:func:`daskrl.driver.launch.preflight.check_components`).
"""

from __future__ import annotations

from typing import Protocol

from daskrl.config.algo_options import OFFLINE_ALGOS, AlgoConfig, algo_problems, online_budget_problems
from daskrl.config.deploy_options import deploy_problems
from daskrl.config.options import (
    RECURRENT_MINIBATCH_TARGETS,
    EnvConfig,
    LearnerConfig,
    ModelConfig,
    PolicyConfig,
    RunConfig,
    SamplerConfig,
)


class Config(Protocol):
    """The sections these rules read (a :class:`~daskrl.config.configuration.Config`, which calls them)."""

    env: EnvConfig
    sampler: SamplerConfig
    model: ModelConfig
    learner: LearnerConfig
    policies: PolicyConfig
    run: RunConfig
    algo: AlgoConfig


def cross_option_problems(config: Config, found: dict[str, str]) -> list[str]:
    """Problems of ``config`` beyond the single-option ones already ``found`` (option -> problem)."""
    problems = []
    s = config.sampler
    splits_valid = "worker_num_splits" not in found and "num_envs_per_worker" not in found
    if splits_valid and s.worker_num_splits > 0 and s.num_envs_per_worker % s.worker_num_splits:
        problems.append(
            f"--worker-num-splits {s.worker_num_splits} does not divide --num-envs-per-worker "
            f"{s.num_envs_per_worker}: each split needs the same number of envs (try --worker-num-splits "
            f"{_divisor_hint(s.num_envs_per_worker, s.worker_num_splits)})"
        )
    problems += _combination_problems(config, found)
    problems += _recurrent_problems(config, found)
    problems += _policy_problems(config, found)
    problems += _deterministic_problems(config)
    problems += _record_schedule_problems(config)
    problems += _curriculum_problems(config.env)
    problems += _league_problems(config)
    problems += _dataset_problems(config)
    problems += _wandb_problems(config.run)
    problems += _optimizer_problems(config, found)
    problems += algo_problems(config, found)
    problems += online_budget_problems(config)
    problems += deploy_problems(config.deploy, config.run.scheduler, config.run.serial)
    return problems


def _deterministic_problems(config: Config) -> list[str]:
    """What --deterministic cannot make repeatable: each option here depends on timing."""
    if not config.run.deterministic:
        return []
    timed = [
        (not config.learner.sync, "--sync (an asynchronous run trains on whatever slots and versions timing brings)"),
        (config.run.train_for_seconds > 0, "no --train-for-seconds (a time is not a step: use --train-for-env-steps)"),
        (config.sampler.inference == "remote", "--inference inline (remote inference batches requests as they come)"),
        (config.learner.num_learners > 1, "--num-learners 1"),
        (config.run.eval_interval_env_steps > 0,
         "no --eval-interval-env-steps (an evaluation plays the version that is current when it starts)"),
    ]
    return [f"--deterministic needs {need}" for bad, need in timed if bad]


def _record_schedule_problems(config: Config) -> list[str]:
    """What `daskrl replay` cannot re-execute from a recorded schedule: each option here is named with why."""
    if not config.run.record_schedule:
        return []
    unsupported = [
        (config.algo.algo != "appo", f"--algo appo (a replay feeds APPO's learner; {config.algo.algo}'s draws from "
                                     "replay shards are not recorded)"),
        (config.sampler.inference == "remote",
         "--inference inline (an inference worker batches requests from several rollout workers as they come)"),
        (config.learner.num_learners > 1, "--num-learners 1"),
        (config.policies.num_policies > 1 or config.policies.self_play_snapshots > 0,
         "one policy (no --num-policies above 1, no --self-play-snapshots)"),
        (config.run.resume, "a new run, not --resume (the steps before the resume were not recorded)"),
        (config.run.sampling_only, "a learner (no --sampling-only: there is nothing to replay)"),
    ]
    return [f"--record-schedule needs {need}" for bad, need in unsupported if bad]


def _curriculum_problems(env: EnvConfig) -> list[str]:
    """A curriculum's options that cannot work together (its tasks' spaces and set_task are checked once the env is
    probed: the preflight)."""
    problems = []
    if env.curriculum and env.curriculum_tasks:
        problems.append("--curriculum (env ids) and --curriculum-tasks (tasks for --env's set_task) are two kinds of "
                        "curriculum: give one")
    if (env.curriculum or env.curriculum_tasks) and env.env_backend != "gymnasium":
        problems.append(f"a curriculum switches each env's task on its own, which --env-backend {env.env_backend} "
                        "(one call for all envs) cannot: use --env-backend gymnasium")
    given = [f"--{name.replace('_', '-')}" for name in ("curriculum_rule", "curriculum_window", "curriculum_replay")
             if name in env.changed()]
    if given and not (env.curriculum or env.curriculum_tasks):
        problems.append(f"{', '.join(given)} shape a curriculum: name its tasks too (--curriculum ID,ID or "
                        "--curriculum-tasks TASK TASK)")
    return problems


def _league_problems(config: Config) -> list[str]:
    """--frozen-opponent alone; --league: members for every role, snapshots to be the league's past players, and what
    it does not combine with (its own mapping draws the opponents; a single-agent env is refused once the env's
    agents are known)."""
    p = config.policies
    if p.frozen_opponent and (p.league or p.num_policies > 1):
        return [f"--frozen-opponent trains one policy against a fixed one: leave out "
                f"{'--league' if p.league else '--num-policies'}"]
    if not p.league:
        given = [flag for flag, value in (("--league-peers", p.league_peers),
                                          ("--league-role", "league_role" in p.changed())) if value]
        return [f"{' and '.join(given)} make(s) this run a member of a league of runs: add --league"] if given else []
    out = _league_peer_problems(config)
    exploiters = p.league_main_exploiters + p.league_league_exploiters
    if not p.league_peers and p.num_policies <= exploiters:
        out.append(f"--league with {p.league_main_exploiters} main exploiter(s) and {p.league_league_exploiters} "
                   f"league exploiter(s) needs a main agent too: --num-policies {exploiters + 1} or more (got "
                   f"{p.num_policies})")
    if not p.self_play_snapshots:
        out.append("--league keeps frozen past versions of its members as players: --self-play-snapshots 1 or more "
                   "(4 when left out)")
    if p.policy_mapping not in ("auto", "league"):
        out.append(f"--league draws every game's opponent itself: leave out --policy-mapping (got "
                   f"{p.policy_mapping!r})")
    if p.pbt:
        out.append("--league and --pbt are two ways of running a population: choose one")
    if p.league_exploiter_resets and config.learner.num_learners > 1 and p.league_peers and p.league_role != "main":
        out.append(f"--league's exploiter resets start an exploiter's weights afresh in one learner, and the other "
                   f"learners of its --num-learners {config.learner.num_learners} would keep the old ones: add "
                   "--no-league-exploiter-resets, or train with --num-learners 1")
    return out


def _league_peer_problems(config: Config) -> list[str]:
    """A member of a league of separate runs (--league-peers) trains one policy, in a role of its own (the cluster
    its peers train on is its own business: a peer not found there is waited for, see daskrl/league/peers.py)."""
    p = config.policies
    if not p.league_peers:
        return ["--league-role is the role of a member run of a league of runs: name the other members' runs too "
                "(--league-peers RUN [RUN ...])"] if "league_role" in p.changed() else []
    out = []
    if p.num_policies != 1:
        out.append(f"a member run of a league of runs (--league-peers) trains one policy, in --league-role: leave out "
                   f"--num-policies (got {p.num_policies})")
    if config.run.experiment in p.league_peers:
        out.append(f"--league-peers names the other members' runs; {config.run.experiment!r} is this run's own name")
    if len(set(p.league_peers)) != len(p.league_peers):
        out.append(f"--league-peers names a run twice: {', '.join(p.league_peers)}")
    return out


def _dataset_problems(config: Config) -> list[str]:
    """The options of sampling a trained policy and recording a dataset, given where they do nothing or cannot work
    (the env's own kind, a single agent with array observations, is checked once it is probed: the preflight)."""
    r = config.run
    problems = [f"{flag} acts in a sampling-only run (daskrl sample, daskrl record): add --sampling-only or leave it "
                "out" for flag, given in (("--sampling-deterministic", r.sampling_deterministic),
                                          ("--sampling-epsilon", r.sampling_epsilon > 0)) if given and not r.sampling_only]
    if "dataset_fraction" in config.algo.changed() and not config.algo.dataset \
            and config.algo.algo not in OFFLINE_ALGOS:  # their own rule asks for the dataset
        problems.append("--dataset-fraction is the share of each minibatch drawn from --dataset: name the dataset "
                        "too (--dataset minari:ID)")
    if config.algo.online_after and not config.algo.dataset:
        problems.append("--online-after counts the updates trained from --dataset before sampling: name the dataset "
                        "too (--dataset minari:ID)")
    if config.algo.dataset and r.sampling_only:
        problems.append("--dataset preloads what a learner trains on, and a sampling-only run has no learner: leave "
                        "out --sampling-only or --dataset")
    if r.record_episodes and not r.record_dataset:
        problems.append("--record-episodes counts the episodes of --record-dataset: name the dataset too")
    if r.record_dataset and config.env.env_backend != "gymnasium":
        problems.append(f"--record-dataset records envs daskrl steps one by one (--env-backend gymnasium), not "
                        f"--env-backend {config.env.env_backend}")
    return problems


def _wandb_problems(r: RunConfig) -> list[str]:
    """The W&B options describe a W&B run, which only --wandb-project starts: one given alone is a forgotten project.
    W&B refuses a tag of more than 64 characters: said here, before the run starts."""
    if r.wandb_project:
        return [f"--wandb-tags: a W&B tag has at most 64 characters; {tag[:20]!r}... has {len(tag)}"
                for tag in r.wandb_tags if len(tag) > 64][:1]
    given = [f"--{name.replace('_', '-')}" for name in ("wandb_entity", "wandb_name", "wandb_group", "wandb_job_type",
                                                         "wandb_tags") if getattr(r, name)]
    return [f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} a Weights & Biases run, and W&B is off "
            "without --wandb-project: add --wandb-project NAME"] if given else []


def _optimizer_problems(config: Config, found: dict[str, str]) -> list[str]:
    """--weight-decay needs an optimizer that decays; --lr-schedule kl_adaptive needs bounds around the rate."""
    lrn, out = config.learner, []
    if found:
        return out
    if lrn.weight_decay > 0 and lrn.optimizer == "adam":
        out.append(f"--weight-decay {lrn.weight_decay:g} is decoupled weight decay, which --optimizer adam has not: "
                   "use --optimizer adamw (or lamb), or leave --weight-decay at 0")
    if lrn.lr_schedule == "kl_adaptive":
        low, high = lrn.lr_adaptive_min, lrn.lr_adaptive_max
        if low >= high:
            out.append(f"--lr-adaptive-min {low:g} must be below --lr-adaptive-max {high:g} (the range "
                       "--lr-schedule kl_adaptive keeps the learning rate in)")
        elif not low <= lrn.learning_rate <= high:
            out.append(f"--learning-rate {lrn.learning_rate:g} is outside [{low:g}, {high:g}], the range "
                       "--lr-schedule kl_adaptive keeps it in: change --learning-rate or --lr-adaptive-min/-max")
    return out


def _policy_problems(config: Config, found: dict[str, str]) -> list[str]:
    """--num-policies and what it does not combine with yet, --pbt, --policy-mapping's form."""
    p, out = config.policies, []
    if found:
        return out
    n = p.num_policies
    if p.pbt and n < 2:
        out.append(f"--pbt needs a population: --num-policies 2 or more (got {n}); try --num-policies 4")
    if n > 1 and config.learner.num_learners > 1:
        out.append(f"--num-policies {n} gives each policy one learner; --num-learners {config.learner.num_learners} "
                   "(a data-parallel group per policy) is not supported with several policies: use --num-learners 1")
    if n > 1 and config.learner.sync:
        out.append(f"--sync trains one policy in lockstep with its samplers; with --num-policies {n} leave it off")
    mapping = p.policy_mapping
    if mapping not in ("auto", "shared", "round_robin", "self_play", "league") and (
            ":" not in mapping or mapping.startswith(":") or mapping.endswith(":")):
        out.append(f"--policy-mapping must be auto, shared, round_robin, self_play or module:function, got {mapping!r}")
    if p.self_play_snapshots and config.sampler.inference == "remote":
        out.append(f"--{'league' if p.league else 'self-play-snapshots'}: snapshots act inline in the rollout workers; "
                   "use --inference inline")
    return out


def _combination_problems(config: Config, found: dict[str, str]) -> list[str]:
    """Options that do not fit together: --num-learners, the devices, --elastic and --adapt."""
    s, lrn, out = config.sampler, config.learner, []
    k = lrn.num_learners
    if found:
        return out
    r = config.run
    if r.adapt:
        low, high = (int(x) for x in r.adapt.split(":"))
        if low > high or high < 2:
            out.append(f"--adapt {r.adapt}: MIN must not exceed MAX, and MAX must be at least 2 (a learner and a "
                       "rollout worker)")
        if r.scheduler:
            out.append("--adapt is for the embedded cluster; on your own cluster call cluster.adapt(...) and run with "
                       "--elastic")
    if (r.elastic or r.adapt) and lrn.sync:
        out.append("--elastic/--adapt cannot change the rollout workers of a --sync run (a training step takes every "
                   "slot of a fixed set); leave out --sync or --elastic")
    if k == 1 and s.inference_device in ("auto", "cpu"):
        return out
    if k > 1 and lrn.batch_size % k:
        out.append(f"--batch-size {lrn.batch_size} does not split over --num-learners {k}: each learner trains on "
                   f"an equal share of every minibatch (try --batch-size {lrn.batch_size // k * k or k})")
    slots = s.num_workers * s.num_splits() * s.slots_per_split
    if k > 1 and lrn.sync and slots % k:
        out.append(f"--sync trains on all {slots} trajectory slots at once, which do not split evenly over "
                   f"--num-learners {k}; change --num-workers, --slots-per-split or --num-learners")
    if s.inference == "inline" and s.inference_device.startswith("cuda"):
        out.append(f"--inference-device {s.inference_device} is for remote inference workers, and inline samplers act "
                   "on the CPU: add --inference remote, or leave --inference-device at auto")
    return out


def _recurrent_problems(config: Config, found: dict[str, str]) -> list[str]:
    """--recurrence, --rollout and --batch-size must cut every slot into whole sequences and every minibatch too; the
    targets come from the pass over the whole batch."""
    if found or config.model.rnn == "none":
        return []
    rollout, lrn = config.sampler.rollout, config.learner
    if lrn.targets_from == "minibatch":
        return [RECURRENT_MINIBATCH_TARGETS]
    length = lrn.recurrence or rollout
    if rollout % length:
        return [f"--recurrence {length} does not divide --rollout {rollout}: each slot is cut into whole sequences "
                f"(try --recurrence {_divisor_hint(rollout, length)})"]
    per_learner = lrn.batch_size // lrn.num_learners
    if per_learner % length:
        return [f"--batch-size {lrn.batch_size} does not hold whole sequences of --recurrence {length} (per learner: "
                f"{per_learner} samples); try --batch-size {max(per_learner // length, 1) * length * lrn.num_learners}"]
    return []


def _divisor_hint(n: int, near: int) -> int:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - near))
