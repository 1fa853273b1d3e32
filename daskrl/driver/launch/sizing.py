"""How much memory a configuration needs, checked against what the machine and the cluster can hold.

Most of a run's memory is its trajectory slots: every rollout worker owns ``worker_num_splits x slots_per_split``
slots of ``rollout`` steps of its envs, in shared memory (``/dev/shm``), and the learner copies ``batch_size x
num_batches_per_epoch`` samples out of them per training step. Both follow from the options and the env's spaces
alone, so a configuration that cannot fit is refused before any process starts, with the estimate and the limit,
instead of failing minutes later in a worker. Envs, models and Python itself need memory on top (not estimated).
"""

from __future__ import annotations

import math
import shutil

import numpy as np

from daskrl.config import Config
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import ConfigError
from daskrl.models.core_state import rnn_state_size
from daskrl.sampling.policies.policy_map import slots_tagged
from daskrl.sampling.slots.trajectories import SlotLayout

SHM_DIR = "/dev/shm"
#: the learner holds about this many copies of a batch at once (the slot copies, the joined batch, its torch views
#: and float conversions)
BATCH_COPIES = 4


def slot_bytes(config: Config, spaces: EnvSpaces) -> int:
    """Shared memory of one rollout worker's trajectory slots."""
    s = config.sampler
    columns = s.num_envs_per_worker * spaces.num_agents  # a multi-agent env: one column per agent
    layout = SlotLayout.for_worker(spaces, columns, s.num_splits(), s.rollout, s.slots_per_split,
                                   rnn_state_size(config.model, spaces),
                                   slots_tagged(config.policies.num_policies, spaces.num_agents))
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
               for shape, dtype in layout.shapes().values())


def batch_bytes(config: Config, spaces: EnvSpaces) -> int:
    """The learner's working copies of one training batch (whole slots, so rounded up to them)."""
    s, lr = config.sampler, config.learner
    per_slot = s.rollout * (s.num_envs_per_worker // s.num_splits()) * spaces.num_agents
    samples = math.ceil(lr.batch_size * lr.num_batches_per_epoch / per_slot) * per_slot
    obs = int(np.prod(spaces.obs_shape, dtype=np.int64)) * 4  # float32 in the learner, whatever the slot's dtype
    return BATCH_COPIES * samples * (obs + 4 * 8)  # + actions, rewards, log-probs, values, targets, ...


def transition_bytes(spaces: EnvSpaces) -> int:
    """One stored replay transition: its observation and next observation in the store's dtype, its action, reward
    and discount (:func:`~daskrl.replay.store.store_shapes`)."""
    from daskrl.replay.store import store_shapes

    shapes = store_shapes(1, tuple(spaces.obs_shape), spaces.obs_dtype, tuple(spaces.action_shape),
                          spaces.action_dtype)
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in shapes.values())


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def check_fits(config: Config, spaces: EnvSpaces, worker_limit: float | None, shm_free: float | None,
               rollout_per_host: int, dataset_steps: int = 0) -> None:
    """Raise :class:`ConfigError` when the slots, the learner's batch or a replay shard's part of ``--dataset``
    (``dataset_steps`` transitions in all, split over the shards) cannot fit: ``worker_limit`` is a Dask worker's
    memory limit in bytes (None or 0: no limit), ``shm_free`` the free bytes of ``/dev/shm`` where the rollout workers
    of one host keep their slots (``rollout_per_host`` of them)."""
    problems = dataset_memory_problems(config, spaces, worker_limit, dataset_steps)
    slots = slot_bytes(config, spaces)
    hint = "lower --num-envs-per-worker, --rollout or --slots-per-split"
    if worker_limit and slots > worker_limit:
        problems.append(f"each rollout worker needs about {_mib(slots)} for its trajectory slots, more than a Dask "
                        f"worker's memory limit of {_mib(worker_limit)}: {hint}")
    if shm_free is not None and slots * rollout_per_host > shm_free:
        problems.append(f"the trajectory slots of {rollout_per_host} rollout worker(s) need about "
                        f"{_mib(slots * rollout_per_host)} of shared memory, and {SHM_DIR} has {_mib(shm_free)} "
                        f"free: {hint}, or make {SHM_DIR} larger")
    if not config.run.sampling_only:
        batch = batch_bytes(config, spaces)
        if worker_limit and batch > worker_limit:
            problems.append(f"the learner needs about {_mib(batch)} for one training batch, more than a Dask "
                            f"worker's memory limit of {_mib(worker_limit)}: lower --batch-size or "
                            "--num-batches-per-epoch")
    if problems:
        raise ConfigError(problems)


def dataset_memory_problems(config: Config, spaces: EnvSpaces, worker_limit: float | None,
                            dataset_steps: int) -> list[str]:
    """A replay shard holds its whole part of the dataset in its worker's memory (one shard per host on one machine,
    or ``--replay-shards N``): the part against the worker's limit."""
    if not dataset_steps or not worker_limit:
        return []
    shards = config.algo.replay_shards if isinstance(config.algo.replay_shards, int) else 1
    part = math.ceil(dataset_steps / shards) * transition_bytes(spaces)
    if part <= worker_limit:
        return []
    return [f"--dataset {config.algo.dataset}: a replay shard would hold {dataset_steps // shards:,} of its "
            f"transitions, about {_mib(part)}, more than a Dask worker's memory limit of {_mib(worker_limit)}: run on "
            "a cluster of several hosts (each host's shard holds its share: --scheduler), or give --replay-shards "
            "a number (the shards split it)"]


def check_fits_this_machine(config: Config, spaces: EnvSpaces, n_workers: int, dataset_steps: int = 0) -> None:
    """For an embedded cluster: Dask's default memory limit splits the machine's memory between the workers."""
    import psutil

    limit = psutil.virtual_memory().total / max(n_workers, 1)
    try:
        shm_free = shutil.disk_usage(SHM_DIR).free
    except OSError:  # no /dev/shm here: nothing to check against
        shm_free = None
    check_fits(config, spaces, limit, shm_free, config.sampler.num_workers, dataset_steps)


def check_fits_cluster(config: Config, spaces: EnvSpaces, workers: dict[str, dict]) -> None:
    """For an existing cluster: the smallest memory limit of its ``workers``
    (:func:`~daskrl.runtime.dask_internals.cluster_workers`)."""
    limits = [float(w.get("memory_limit") or 0) for w in workers.values()]
    limit = min((x for x in limits if x > 0), default=0.0)
    check_fits(config, spaces, limit or None, None, config.sampler.num_workers)
