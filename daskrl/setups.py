"""What each component is configured with: one frozen dataclass per role (the contract between the driver and the
components).

Components never read options with fallback defaults of their own: the driver builds these setups from the run's
config in one place (:func:`daskrl.driver.fleet.role_setups.role_setups`) and hands the same function's output to the first
incarnation of a component and to every one recreated after a fault, so a recreated component cannot quietly run
with other settings. The config sections inside are copies, so a setup does not change when the caller's config
does. What the user registered in this process (env factories, model components) travels in them too: worker
processes do not share this one's registries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from daskrl.config import AlgoConfig, EnvConfig, LearnerConfig, ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.registry import Shipped


@dataclass(frozen=True)
class EpsilonGreedy:
    """One rollout worker's exploration (a setup field: frozen, built by the driver)."""

    final_eps: float  # this worker's epsilon once the decay is over
    decay_steps: int  # env steps of this worker over which epsilon falls from 1 to ``final_eps`` (0: none)
    num_actions: int
    #: where this worker's decay starts: its share of the env steps the run took before it was created (a resumed
    #: run's, or those of a rollout worker it replaces), so a resume or a recovery does not explore from 1 again
    start_steps: int

    @classmethod
    def for_worker(cls, index: int, workers: int, eps: float, alpha: float, fraction: float, total_env_steps: int,
                   num_actions: int, run_env_steps: int) -> EpsilonGreedy:
        """Worker ``index`` of ``workers`` (an elastic run's extra workers take the exponents of the first ones in
        turn) created once the run took ``run_env_steps``; ``total_env_steps`` 0 (no budget): no decay."""
        position = (index % workers) / (workers - 1) if workers > 1 else 0.0
        decay = int(fraction * total_env_steps / workers)
        return cls(float(eps ** (1.0 + alpha * position)), decay, num_actions, run_env_steps // max(workers, 1))

    def epsilon(self, steps: int) -> float:
        """Epsilon after this worker took ``steps`` env steps."""
        if steps >= self.decay_steps:
            return self.final_eps
        return 1.0 + (self.final_eps - 1.0) * steps / self.decay_steps


@dataclass(frozen=True)
class UniformWarmup:
    """One rollout worker's warm-up (TD3's, as the paper's and SB3's): uniformly random actions in the Box for its
    first ``steps`` env steps, its share of ``--learning-starts``, so the replay starts with transitions that span
    the action box instead of the initial actor's near-constant output (a setup field: frozen, built by the driver)."""

    steps: int
    low: tuple[float, ...]
    high: tuple[float, ...]

    @classmethod
    def for_worker(cls, learning_starts: int, workers: int, low: list[float], high: list[float],
                   run_env_steps: int) -> UniformWarmup:
        """A worker's share of what is left of the warm-up once the run took ``run_env_steps`` (none after a resume
        or for a replacement that comes after it)."""
        return cls(-(-max(learning_starts - run_env_steps, 0) // max(workers, 1)), tuple(low), tuple(high))


@dataclass(frozen=True)
class SamplingNoise:
    """How a sampling-only run plays a trained policy (``daskrl record``): its most likely action or a sampled one,
    replaced by a uniformly random action with probability ``epsilon`` (a setup field: frozen, built by the driver)."""

    deterministic: bool
    epsilon: float
    num_actions: int  # a Discrete space's actions (0: a Box, drawn between ``low`` and ``high``)
    low: tuple[float, ...]
    high: tuple[float, ...]


@dataclass(frozen=True)
class PolicySetup:
    """How a sampler builds and runs the policy: the network, where its parameters are published, the fast paths."""

    spaces: EnvSpaces
    model: ModelConfig
    params: dict | None  # the learner's parameter block; None: the initial weights stay (sampling only)
    seed: int
    numpy_inference: bool
    inference_precision: str
    device: str  # --inference-device for remote inference workers; inline samplers act on the CPU
    components: Shipped  # the user's registered model components (daskrl/models/registry.py)
    # agents with different spaces: (obs_len, act_dim) of the slot rows this policy reads and writes (EnvSpaces.cut_for)
    cut: tuple[int, int] | None
    #: how a sampler explores (DQN's epsilon-greedy, TD3's warm-up; None: the policy samples its own actions)
    exploration: EpsilonGreedy | UniformWarmup | SamplingNoise | None
    #: --deterministic or --record-schedule: the run must repeat, so no kernel is chosen by timing
    #: (daskrl/models/inputs/activations.py)
    repeatable: bool
    #: a sampling-only run's fixed weights ({"version", "weights"}: --init-checkpoint's); None: the initial weights, or
    #: the learner's as ``params`` publishes them
    weights: dict | None


@dataclass(frozen=True)
class SamplerCourse:
    """What the driver changes in every rollout worker while a run goes on, kept on the driver's side so that a worker
    created later (a recovered or an added one) starts where the others are."""

    task_level: int = 0  # the task a curriculum has reached (daskrl/curriculum/): the envs play it from their next reset
    #: a league's opponent draw (daskrl/league/): by trained policy, the weight of each acting policy as its opponent;
    #: None: no league, or none drawn yet (every other acting policy alike)
    opponent_weights: tuple[tuple[float, ...], ...] | None = None


@dataclass(frozen=True)
class RolloutSetup:
    """One rollout worker: its envs, its trajectory slots, and the policy it runs inline (None: remote inference
    answers its requests on ``policy_queue``)."""

    env: EnvConfig
    env_factory: Callable | None  # a factory registered with register_env in the driver, shipped to the worker
    spaces: EnvSpaces
    worker_index: int
    num_envs: int
    num_splits: int
    rollout: int
    slots_per_split: int
    seed: int
    env_failure_limit: int
    info_keys: tuple[str, ...]
    rnn_state_size: int  # floats of recurrent state per env, kept in the slots (0: feed-forward)
    policy_queue: str
    policy: PolicySetup | None
    # several policies or a multi-agent env: the slots say who acted (daskrl/sampling/slots/trajectories.py)
    tagged: bool
    num_policies: int
    snapshots: int  # self-play opponents: frozen past versions of policy 0, acting as policies N.. (no learner)
    policy_mapping: str  # --policy-mapping (daskrl/sampling/policies/policy_map.py)
    run_envs: int  # the run's env count, which numbers episodes run-wide for the mapping
    # inline: each policy's parameter block (policy 0's is policy.params), then each self-play snapshot's
    policy_params: tuple[dict | None, ...]
    policy_spaces: tuple[EnvSpaces, ...]  # by acting policy, like policy_params (the slots hold the union: spaces)
    #: --record-schedule: log each filled slot's split and policy versions (daskrl/sampling/slots/fill_log.py)
    record_schedule: bool
    #: --record-dataset: how many whole episodes to record from each env of this worker (-1: every one); None: none
    record_quotas: tuple[int, ...] | None
    #: what the driver steers while the run goes on (a curriculum's task, a league's opponents), as it stood when
    #: this worker was made
    course: SamplerCourse


@dataclass(frozen=True)
class InferenceSetup:
    """One inference worker: the queue it takes requests from and the policy it runs (``policy_index``: which of
    --num-policies)."""

    policy_queue: str
    policy: PolicySetup
    policy_index: int


@dataclass(frozen=True)
class LearnerSetup:
    """A learner: the network, the training options, how many samples make one training step (of the whole group:
    each member trains on ``1 / num_learners`` of them) and the learner's rank in its group (0: the leader)."""

    spaces: EnvSpaces
    model: ModelConfig
    learner: LearnerConfig
    samples_per_batch: int
    #: the run's budget, the length of --lr-schedule linear: in env steps, or in updates for an offline algorithm
    #: (--train-for-updates; ``offline``)
    total_env_steps: int
    seed: int
    remote_params: bool  # readers on other hosts: parameters are also published over Dask comms
    rank: int  # in the learner group: 0 is the leader (the only learner with one)
    num_learners: int
    policy_index: int  # which of --num-policies this learner trains (on its columns of tagged slots)
    tagged: bool  # slots say who acted: train on this policy's steps only
    snapshots: int  # self-play: frozen past versions of this policy kept in parameter blocks (policy 0 only)
    snapshot_every: int  # policy versions between two snapshots
    #: --frozen-opponent's weights (policy 0's leader): every snapshot holds them, and none is ever refreshed
    frozen_opponent: dict | None
    components: Shipped  # the user's registered model components (daskrl/models/registry.py)
    cut: tuple[int, int] | None  # the policy's part of the slot rows, as PolicySetup.cut
    algo: AlgoConfig  # --algo and the off-policy options (replay, targets, exploration)
    trainer: str  # the algorithm's trainer, "module:class" (daskrl/driver/fleet/algorithms.py, trainer_path)
    #: --deterministic: hold each step's slots until the driver read the run at it, and seed each step's minibatches
    deterministic: bool
    #: --record-schedule: log each step's slots and metrics, and seed each step's minibatches as --deterministic does
    record_schedule: bool
    #: an offline algorithm (trained from --dataset alone): its progress is its updates, not env steps
    offline: bool


@dataclass(frozen=True)
class DatasetShare:
    """One replay shard's part of ``--dataset`` (:mod:`daskrl.replay.dataset_share`): episodes ``[first, stop)`` of
    the Minari dataset in ``path``."""

    dataset_id: str
    path: str  # the dataset's folder, as the driver found it (a worker's MINARI_DATASETS_PATH may differ)
    first: int
    stop: int
    transitions: int  # the steps of those episodes: what the shard holds
    fraction: float  # the share of every minibatch drawn from it (--dataset-fraction)

    @property
    def episodes(self) -> int:
        return self.stop - self.first


@dataclass(frozen=True)
class ReplaySetup:
    """A replay shard: what it stores (the slots' spaces), how much, and how it serves draws."""

    spaces: EnvSpaces
    capacity: int  # transitions this shard keeps
    learning_starts: int  # transitions it holds before it serves a draw (its share of --learning-starts)
    algo: AlgoConfig
    gamma: float
    reward_scale: float  # rewards are scaled, then clipped (0: not), before the n-step sums: --reward-scale/-clip
    reward_clip: float
    batch_size: int
    seed: int
    dataset: DatasetShare | None = None  # its part of --dataset (None: no dataset, or a shard added later)
    #: every draw comes from ``dataset``, served as fast as the learner asks: an offline run's shard (it then has
    #: no ring), or --online-after's until the run starts sampling (``go_online``)
    offline: bool = False


@dataclass(frozen=True)
class RelaySetup:
    """A host's parameter relay: the learners' parameter blocks it copies onto its host, by acting policy (the
    trained policies', then the self-play snapshots'; None: not known yet, not relayed)."""

    blocks: tuple[dict | None, ...]


@dataclass(frozen=True)
class RoleSetups:
    """A run's setups by role."""

    learners: tuple[LearnerSetup, ...]  # each policy's learner (its group's leader), by policy; empty: sampling only
    members: tuple[LearnerSetup, ...]  # ranks 1.. of policy 0's data-parallel group (--num-learners)
    rollout: tuple[RolloutSetup, ...]
    inference: tuple[InferenceSetup, ...]  # each policy's inference workers' (by policy; empty: inline)
    replay: tuple[ReplaySetup, ...]  # the replay shards' (empty: an on-policy algorithm)
