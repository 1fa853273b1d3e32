"""Every component's setup (:mod:`daskrl.setups`), built from the run's config and env spaces in one place.

The fleet calls these for the first incarnation of each component and for every one recreated after a fault, so a
recreated component runs with exactly the settings its predecessor had.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from daskrl.config import Config
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.registry import registered_factory
from daskrl.models.core_state import rnn_state_size
from daskrl.models.registry import pack_components
from daskrl.protocol import policy_queue
from daskrl.replay.ratio import AUTO_MAX_BATCHES, batches_per_request
from daskrl.sampling.policies.policy_map import mapping_of, opponent_slots, peer_slots, slots_tagged, snapshot_owners
from daskrl.sampling.policies.policy_spaces import policy_spaces
from daskrl.setups import (
    DatasetShare,
    EpsilonGreedy,
    InferenceSetup,
    LearnerSetup,
    PolicySetup,
    ReplaySetup,
    RoleSetups,
    RolloutSetup,
    SamplerCourse,
    SamplingNoise,
    UniformWarmup,
)


def role_setups(config: Config, spaces: EnvSpaces, params: Sequence[dict | None] = (),
                remote_params: bool = False, run_env_steps: int = 0, weights: dict | None = None,
                course: SamplerCourse = SamplerCourse()) -> RoleSetups:
    """Every component's setup for this run. ``params``: each acting policy's parameter block as samplers attach it
    (the trained policies', then the self-play snapshots'); missing ones are not known yet (before the learners
    exist, and in sampling-only runs: the samplers keep their initial weights). The replay shards' are those of a
    number given to ``--replay-shards`` (none for ``auto``, whose count the placement decides: the fleet builds
    each shard's with :func:`replay_setup`). ``run_env_steps``: the run's env steps so far (a resumed run's), where
    the samplers' exploration goes on from. ``weights``: what a sampling-only run acts with (``{"version",
    "weights"}``: --init-checkpoint's; None: the initial weights). ``course``: where the driver has steered the
    samplers so far (a resumed curriculum's task), where the rollout workers start."""
    c, s = config, config.sampler
    policy_params = _by_policy(config, params)
    rollout = tuple(rollout_setup(config, spaces, policy_params, index, run_env_steps, weights, course)
                    for index in range(s.num_workers))
    inference = tuple(InferenceSetup(policy_queue(k), _policy_setup(
        config, spaces, k, policy_params[k], c.run.seed + 1009 * k, s.inference_device,
        sampler_exploration(config, spaces, 0, run_env_steps) if weights is not None else None, weights), k)
        for k in range(c.policies.num_policies)) if s.inference == "remote" else ()
    policies = 0 if c.run.sampling_only else c.policies.num_policies
    leaders = tuple(_learner_setup(config, spaces, policy, 0, remote_params) for policy in range(policies))
    members = tuple(_learner_setup(config, spaces, 0, rank, remote_params)  # several policies: one learner each
                    for rank in range(1, c.learner.num_learners if policies else 1))
    shards = c.algo.replay_shards if isinstance(c.algo.replay_shards, int) else 0
    replay = tuple(setup for j in range(shards) if (setup := replay_setup(config, spaces, j, shards)) is not None)
    return RoleSetups(leaders, members, rollout, inference, replay)


def replay_setup(config: Config, spaces: EnvSpaces, index: int, initial: int,
                 dataset: DatasetShare | None = None, dataset_only: bool = False) -> ReplaySetup | None:
    """Replay shard ``index``'s setup, in a run that started with ``initial`` shards (None for an on-policy
    algorithm or a sampling-only run). Each shard keeps ``--replay-capacity / initial`` transitions and waits for
    ``--learning-starts / initial`` of them; a shard added later (a host that joined) gets the same share.
    ``dataset``: its part of --dataset, if any; ``dataset_only``: it serves from that part alone for now (an
    offline run, or --online-after before sampling starts)."""
    a = config.algo
    if not algorithm_of(config).uses_replay or config.run.sampling_only:
        return None
    share, offline = max(initial, 1), algorithm_of(config).offline
    return ReplaySetup(spaces=spaces, capacity=1 if offline else -(-a.replay_capacity // share),  # no ring offline
                       learning_starts=-(-a.learning_starts // share), algo=_algo(config),
                       gamma=config.learner.gamma, reward_scale=config.learner.reward_scale,
                       reward_clip=config.learner.reward_clip, batch_size=config.learner.batch_size,
                       seed=config.run.seed + 7919 * index, dataset=dataset, offline=dataset_only)


def _policy_setup(config: Config, spaces: EnvSpaces, k: int, params: dict | None, seed: int,
                  device: str, exploration: EpsilonGreedy | UniformWarmup | SamplingNoise | None,
                  weights: dict | None) -> PolicySetup:
    """How a sampler runs acting policy ``k`` (a trained one, or a self-play snapshot)."""
    s, own = config.sampler, acting_spaces(config, spaces)[k]
    return PolicySetup(own, _model(config), params, seed, s.numpy_inference, s.inference_precision, device,
                       pack_components(), spaces.cut_for(own), exploration,
                       config.run.deterministic or config.run.record_schedule, weights)


def sampler_exploration(config: Config, spaces: EnvSpaces, index: int,
                        run_env_steps: int) -> EpsilonGreedy | UniformWarmup | SamplingNoise | None:
    """How rollout worker ``index`` acts around its policy: a trained policy that a sampling-only run plays
    (--init-checkpoint: ``daskrl record``) as ``daskrl enjoy`` plays it, with --sampling-epsilon's noise; otherwise
    the algorithm's own way of exploring (:mod:`daskrl.driver.fleet.algorithms`)."""
    r = config.run
    if not (r.sampling_only and r.init_checkpoint):
        return algorithm_of(config).sampler_policy(config, spaces, index, run_env_steps)
    discrete = spaces.action_kind == "discrete"
    return SamplingNoise(r.sampling_deterministic or algorithm_of(config).acts_greedily, r.sampling_epsilon,
                         int(spaces.num_actions) if discrete else 0, tuple(spaces.low or ()), tuple(spaces.high or ()))


def _learner_setup(config: Config, spaces: EnvSpaces, policy: int, rank: int, remote_params: bool) -> LearnerSetup:
    """Policy ``policy``'s learner of rank ``rank`` in its group (0: the leader, which keeps the policy's self-play
    snapshots: policy 0's, or every league member's)."""
    c, own, offline = config, acting_spaces(config, spaces)[policy], algorithm_of(config).offline
    return LearnerSetup(
        spaces=own, cut=spaces.cut_for(own), model=_model(c), learner=dataclasses.replace(c.learner),
        samples_per_batch=_round_size(c) if c.learner.sync else c.learner.batch_size * c.learner.num_batches_per_epoch,
        total_env_steps=c.run.train_for_updates if offline else c.run.train_for_env_steps,
        seed=c.run.seed + 1009 * policy, remote_params=remote_params,
        rank=rank, num_learners=c.learner.num_learners, components=pack_components(), policy_index=policy,
        tagged=is_tagged(c, spaces), snapshots=0 if rank else snapshot_owners(c.policies).count(policy),
        snapshot_every=c.policies.self_play_snapshot_every, algo=_algo(c),
        frozen_opponent=frozen_opponent(c.policies.frozen_opponent) if policy == 0 and rank == 0 else None,
        trainer=algorithm_of(c).trainer_path, deterministic=c.run.deterministic, record_schedule=c.run.record_schedule,
        offline=offline)


@functools.lru_cache(maxsize=2)
def frozen_opponent(path: str) -> dict | None:
    """--frozen-opponent's weights, read once however often the setups are made (a restarted learner's too)."""
    if not path:
        return None
    from daskrl.learning.checkpoints import initial_weights  # torch: only for a run that names one

    return initial_weights(path, opponent=True)["weights"]


def _algo(config: Config):
    """A copy of the algorithm's options with ``--replay-batches-per-request`` resolved (0: from the ratio and the
    slot size; offline, where no ratio holds draws back, the most a request carries), so that the shards and the
    learner agree on it."""
    s = config.sampler
    slot_steps = s.num_envs_per_worker // s.num_splits() * s.rollout
    if algorithm_of(config).offline:
        return dataclasses.replace(config.algo, replay_batches_per_request=config.algo.replay_batches_per_request
                                   or AUTO_MAX_BATCHES)
    return dataclasses.replace(config.algo, replay_batches_per_request=batches_per_request(
        config.algo.replay_batches_per_request, config.algo.replay_ratio, slot_steps))


def _model(config: Config):
    """A copy of the model options (a setup must not change when the caller's config does)."""
    return dataclasses.replace(config.model, hidden_sizes=list(config.model.hidden_sizes))


def acting_spaces(config: Config, spaces: EnvSpaces) -> tuple[EnvSpaces, ...]:
    """Each acting policy's spaces (the trained ones', then the self-play snapshots', each its owner's, then a league
    of runs' peer slots, which play the seat of this run's member): the slots' own unless the agents' spaces differ
    (daskrl/sampling/policies/policy_spaces.py)."""
    p, owners = config.policies, snapshot_owners(config.policies)
    own = policy_spaces(mapping_of(p), p.num_policies, spaces, opponent_slots(p))
    return own + tuple(own[k] for k in owners) + (own[0],) * peer_slots(p)


def is_tagged(config: Config, spaces: EnvSpaces) -> bool:
    """Whether slots record who acted per column: several policies, or agents that may sit steps out."""
    return slots_tagged(config.policies.num_policies, spaces.num_agents)


def _by_policy(config: Config, params: Sequence[dict | None]) -> tuple[dict | None, ...]:
    """Parameter blocks by acting policy: the trained ones, the self-play snapshots, then a league of runs' peer
    slots (None: not yet known)."""
    acting = config.policies.num_policies + opponent_slots(config.policies)
    return tuple(params) + (None,) * (acting - len(params))


def rollout_setup(config: Config, spaces: EnvSpaces, params: Sequence[dict | None], index: int,
                  run_env_steps: int = 0, weights: dict | None = None,
                  course: SamplerCourse = SamplerCourse()) -> RolloutSetup:
    """The setup of rollout worker ``index`` (an elastic run adds workers beyond ``--num-workers``), created once the
    run took ``run_env_steps`` and the driver steered the samplers as ``course`` says; ``params`` and ``weights``
    as :func:`role_setups` takes them."""
    c, s = config, config.sampler
    policy_params = _by_policy(config, params)
    exploration = sampler_exploration(config, spaces, index, run_env_steps)
    policy = _policy_setup(config, spaces, 0, policy_params[0], c.run.seed + 1000 * index, "cpu", exploration,
                           weights) if s.inference == "inline" else None
    return RolloutSetup(env=dataclasses.replace(c.env, env_kwargs=dict(c.env.env_kwargs)),
                        env_factory=registered_factory(c.env.env), spaces=spaces, worker_index=index,
                        num_envs=s.num_envs_per_worker, num_splits=s.num_splits(), rollout=s.rollout,
                        slots_per_split=s.slots_per_split, seed=c.run.seed, env_failure_limit=s.env_failure_limit,
                        info_keys=tuple(s.info_keys), rnn_state_size=rnn_state_size(c.model, spaces),
                        policy_queue=policy_queue(0), policy=policy, tagged=is_tagged(c, spaces),
                        num_policies=c.policies.num_policies, snapshots=opponent_slots(c.policies),
                        policy_mapping=mapping_of(c.policies),
                        run_envs=s.num_workers * s.num_envs_per_worker, policy_params=policy_params,
                        policy_spaces=acting_spaces(config, spaces), record_schedule=c.run.record_schedule,
                        record_quotas=record_quotas(config, index), course=course)


def record_quotas(config: Config, index: int) -> tuple[int, ...] | None:
    """--record-dataset: the episodes each env of rollout worker ``index`` records. With --record-episodes N, the N
    are shared evenly over the run's envs (the first ``N mod envs`` of them record one more), and each env records its
    first ones: taking whichever episodes end first would favour the short ones. A worker an elastic run adds beyond
    --num-workers records none then."""
    r, s = config.run, config.sampler
    if not r.record_dataset:
        return None
    if not r.record_episodes:
        return (-1,) * s.num_envs_per_worker
    envs = s.num_workers * s.num_envs_per_worker
    first = index * s.num_envs_per_worker
    return tuple(r.record_episodes // envs + (g < r.record_episodes % envs) if g < envs else 0
                 for g in range(first, first + s.num_envs_per_worker))


def _round_size(config: Config) -> int:
    """Samples in every slot of every rollout worker: one training step of --sync."""
    s = config.sampler
    return s.num_workers * s.num_envs_per_worker * s.rollout * s.slots_per_split
