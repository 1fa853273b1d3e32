"""Every component's setup (:mod:`daskrl.setups`), built from the run's config and env spaces in one place.

The fleet calls these for the first incarnation of each component and for every one recreated after a fault, so a
recreated component runs with exactly the settings its predecessor had.
"""

from __future__ import annotations

import dataclasses

from daskrl.config import Config
from daskrl.envs.registry import registered_factory
from daskrl.envs.spaces import EnvSpaces
from daskrl.models.recurrent import rnn_state_size
from daskrl.models.registry import pack_components
from daskrl.protocol import policy_queue
from daskrl.sampling.policy_map import slots_tagged
from daskrl.sampling.policy_spaces import policy_spaces
from daskrl.setups import InferenceSetup, LearnerSetup, PolicySetup, RoleSetups, RolloutSetup


def role_setups(config: Config, spaces: EnvSpaces, params: dict | list[dict | None] | None,
                remote_params: bool) -> RoleSetups:
    """Every component's setup for this run; ``params`` describes the learner's parameter block (None before the
    learner exists, and in sampling-only runs), or with several policies each one's (a list, by policy)."""
    c, s = config, config.sampler
    policy_params = _by_policy(config, params)
    params = policy_params[0]
    model = dataclasses.replace(c.model, hidden_sizes=list(c.model.hidden_sizes))
    components = pack_components()
    own = acting_spaces(config, spaces)

    def policy(seed: int, device: str = "cpu", k: int = 0) -> PolicySetup:
        return PolicySetup(own[k], model, policy_params[k], seed, s.numpy_inference, s.inference_precision, device,
                           components, spaces.cut_for(own[k]))

    rollout = tuple(rollout_setup(config, spaces, policy_params, index) for index in range(s.num_workers))
    by_policy = tuple(InferenceSetup(policy_queue(k), policy(c.run.seed + 1009 * k, s.inference_device, k), k)
                      for k in range(c.policies.num_policies)) if s.inference == "remote" else ()
    learners = () if c.run.sampling_only else tuple(LearnerSetup(
        spaces=own[policy], cut=spaces.cut_for(own[policy]), model=model, learner=dataclasses.replace(c.learner),
        samples_per_batch=_round_size(c) if c.learner.sync else c.learner.batch_size * c.learner.num_batches_per_epoch,
        total_env_steps=c.run.train_for_env_steps, seed=c.run.seed + 1009 * policy, remote_params=remote_params, rank=rank,
        num_learners=c.learner.num_learners, components=components, policy_index=policy, tagged=is_tagged(c, spaces),
        snapshots=c.policies.self_play_snapshots if policy == 0 and rank == 0 else 0,
        snapshot_every=c.policies.self_play_snapshot_every)
        for policy in range(c.policies.num_policies) for rank in range(c.learner.num_learners))
    return RoleSetups(learners, rollout, by_policy[0] if by_policy else None, by_policy)


def acting_spaces(config: Config, spaces: EnvSpaces) -> tuple[EnvSpaces, ...]:
    """Each acting policy's spaces (the trained ones', then the self-play snapshots', which are policy 0's): the
    slots' own unless the agents' spaces differ (daskrl/sampling/policy_spaces.py)."""
    p = config.policies
    own = policy_spaces(p.policy_mapping, p.num_policies, spaces, p.self_play_snapshots)
    return own + (own[0],) * p.self_play_snapshots


def is_tagged(config: Config, spaces: EnvSpaces) -> bool:
    """Whether slots record who acted per column: several policies, or agents that may sit steps out."""
    return slots_tagged(config.policies.num_policies, spaces.num_agents)


def _by_policy(config: Config, params: dict | list[dict | None] | None) -> tuple[dict | None, ...]:
    """Parameter blocks by acting policy: the trained ones, then the self-play snapshots (None: not yet known)."""
    acting = config.policies.num_policies + config.policies.self_play_snapshots
    given = tuple(params) if isinstance(params, (list, tuple)) else (params,)
    return given + (None,) * (acting - len(given))


def rollout_setup(config: Config, spaces: EnvSpaces, params: dict | list[dict | None] | None,
                  index: int) -> RolloutSetup:
    """The setup of rollout worker ``index`` (an elastic run adds workers beyond ``--num-workers``)."""
    c, s = config, config.sampler
    policy_params = _by_policy(config, params)
    params = policy_params[0]
    own = acting_spaces(config, spaces)
    policy = PolicySetup(own[0], dataclasses.replace(c.model, hidden_sizes=list(c.model.hidden_sizes)), params,
                         c.run.seed + 1000 * index, s.numpy_inference, s.inference_precision, "cpu",
                         pack_components(), spaces.cut_for(own[0])) \
        if s.inference == "inline" else None
    return RolloutSetup(env=dataclasses.replace(c.env, env_kwargs=dict(c.env.env_kwargs)),
                        env_factory=registered_factory(c.env.env), spaces=spaces, worker_index=index,
                        num_envs=s.num_envs_per_worker, num_splits=s.num_splits(), rollout=s.rollout,
                        slots_per_split=s.slots_per_split, seed=c.run.seed, env_failure_limit=s.env_failure_limit,
                        info_keys=tuple(s.info_keys), rnn_state_size=rnn_state_size(c.model, spaces),
                        policy_queue=policy_queue(), policy=policy, tagged=is_tagged(c, spaces),
                        num_policies=c.policies.num_policies, snapshots=c.policies.self_play_snapshots,
                        policy_mapping=c.policies.policy_mapping,
                        run_envs=s.num_workers * s.num_envs_per_worker, policy_params=policy_params,
                        policy_spaces=own)


def _round_size(config: Config) -> int:
    """Samples in every slot of every rollout worker: one training step of --sync."""
    s = config.sampler
    return s.num_workers * s.num_envs_per_worker * s.rollout * s.slots_per_split
