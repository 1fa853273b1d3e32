"""Everything about a run that can be checked before any process starts, in one call.

The CLI calls it before it starts the worker forkserver, and ``train()`` calls it first: every option (type, range,
NaN), the env (built once, for its spaces; once more to render, when videos are asked for), that wandb is installed
for --wandb-project, that --dataset names a dataset of this env, and, for an embedded cluster, whether the run's
memory fits this machine. It also puts the defaults of the env's family (daskrl/config/env_defaults.py) in place of
options left unset. It imports nothing heavy (no Dask, no torch, no wandb), so checking costs the user no start-up
time.
"""

from __future__ import annotations

import time

from daskrl.config import Config
from daskrl.config.algo_options import algo_space_problems, apply_algo_model
from daskrl.config.env_defaults import apply_env_defaults, needs_profile
from daskrl.config.task_profile import TaskProfile
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.driver.fleet.placement import workers_needed
from daskrl.driver.launch.resumed_network import adopt_trained_network
from daskrl.driver.launch.sizing import check_fits_this_machine
from daskrl.envs import EnvSpaces, probe_env
from daskrl.envs.curriculum_env import check_curriculum
from daskrl.envs.groups import check_backend
from daskrl.envs.packages import env_package_problems
from daskrl.errors import ConfigError
from daskrl.models.registry import model_name_problems
from daskrl.sampling.policies.policy_map import check_mapping, mapping_of, opponent_slots
from daskrl.sampling.policies.policy_spaces import policy_spaces


def default_experiment_name(env: str) -> str:
    return f"{env.replace('/', '_').replace(':', '_')}_{time.strftime('%Y%m%d_%H%M%S')}"


def check_policies(config: Config, spaces: EnvSpaces) -> None:
    """What a multi-agent env or several policies need: a mapping that answers (and, where agents' spaces differ,
    gives each policy agents of one kind)."""
    agents, p = spaces.agent_ids or ("agent_0",), config.policies
    snapshots = opponent_slots(p)
    check_mapping(mapping_of(p), p.num_policies, agents, snapshots)
    # where the agents' spaces differ: the agents each policy can get
    own = policy_spaces(mapping_of(p), p.num_policies, spaces, snapshots)
    if any(o != own[0] for o in own):  # networks of different shapes: no weights pass from one policy to another
        shared = [f"{flag} copies one network's weights into every policy, but this run's policies have different "
                  f"spaces (their agents' spaces differ): leave {flag} out" for flag, value in
                  (("--pbt", config.policies.pbt), ("--init-checkpoint", config.run.init_checkpoint)) if value]
        if shared:
            raise ConfigError(shared)


def check_frozen_opponent(config: Config, spaces: EnvSpaces) -> None:
    """--frozen-opponent names a checkpoint whose network is this run's (torch: only for a run that names one)."""
    from daskrl.driver.fleet.role_setups import acting_spaces, frozen_opponent
    from daskrl.learning.snapshots import check_same_network
    from daskrl.models.actor_critic import build_model

    own = build_model(acting_spaces(config, spaces)[0], config.model, config.run.seed).state_dict_numpy()
    check_same_network(own, frozen_opponent(config.policies.frozen_opponent))


def check_components(config: Config) -> None:
    """Import the modules of --env-packages (the env ids and model components they register count from then on),
    then look up the components --encoder, --rnn and --key-encoders name: one line per problem. Kept out of
    :meth:`Config.validate`, which checks values and imports no user code."""
    m = config.model
    problems = env_package_problems(config.env.env_packages) or model_name_problems(m.encoder, m.rnn, m.key_encoders)
    if problems:
        raise ConfigError(problems)


def check_recordable(dataset_id: str, env: str, spaces: EnvSpaces) -> None:
    """--record-dataset: Minari is installed, the id is free, and the env gives what a dataset of it holds here (one
    agent; array or Dict observations; Discrete, MultiDiscrete or Box actions)."""
    from daskrl.monitor.outputs.dataset_file import check_can_record

    kinds = [(spaces.num_agents > 1, f"{env!r} is a multi-agent env"),
             (spaces.action_kind == "composite", f"{env!r} takes Tuple or Dict actions")]
    problems = [f"--record-dataset records single-agent envs with array actions; {why}"
                for bad, why in kinds if bad]
    if problems:
        raise ConfigError(problems)
    check_can_record(dataset_id)


def check_dataset(config: Config) -> int:
    """--dataset: a Minari dataset of this env (Minari installed); returns its transitions."""
    from daskrl.replay.dataset_share import dataset_folder, dataset_problems, episode_lengths, minari_id

    if problems := dataset_problems(config.algo.dataset, config.env):
        raise ConfigError(problems)
    return int(episode_lengths(dataset_folder(minari_id(config.algo.dataset))).sum())


def task_profile(config: Config) -> TaskProfile | None:
    """The task's profile where the env's family has rules that read it (measured once per env: cached)."""
    if not needs_profile(config):
        return None
    from daskrl.envs.task_probe import profile_task

    return profile_task(config.env.env, config.env.env_kwargs)


def preflight(config: Config, client: object = None) -> EnvSpaces:
    """Check ``config`` (see the module docstring) and return the env's spaces; raises one readable
    :class:`~daskrl.errors.DaskRLError`. Gives the run its default experiment name when it has none."""
    config.validate()
    check_components(config)
    if not config.run.experiment:
        config.run.experiment = default_experiment_name(config.env.env)
    if config.run.init_checkpoint:
        from daskrl.learning.checkpoints import checkpoint_file  # torch: only for a run that starts from one

        checkpoint_file(config.run.init_checkpoint)  # there to start from
    if config.policies.frozen_opponent:  # there to play against (its network is checked once the env is known)
        from daskrl.learning.checkpoints import checkpoint_file

        checkpoint_file(config.policies.frozen_opponent, "--frozen-opponent")
    spaces = probe_env(config.env.env, config.env.env_kwargs, config.env.obs_keys, config.env.action_mask_key)
    apply_env_defaults(config, task_profile(config))
    check_backend(config.env.env_backend, config.env.env, config.env.env_kwargs)
    check_curriculum(config.env, spaces)
    check_policies(config, spaces)
    apply_algo_model(config)
    adopt_trained_network(config)  # a resume trains the network it saved, whatever today's defaults are
    if config.policies.frozen_opponent:
        check_frozen_opponent(config, spaces)
    algorithm = algorithm_of(config)
    if problems := algo_space_problems(algorithm.name, algorithm.action_kinds, spaces.action_kind,
                                       spaces.box_is_bounded()):
        raise ConfigError(problems)
    if config.run.save_video_every_env_steps and not config.run.sampling_only:
        from daskrl.monitor.outputs.video import check_can_record

        check_can_record(config.env.env, config.env.env_kwargs)  # the env renders frames, imageio is there
    if config.run.record_dataset:
        check_recordable(config.run.record_dataset, config.env.env, spaces)
    dataset_steps = check_dataset(config) if config.algo.dataset else 0
    if config.run.wandb_project:
        from daskrl.monitor.outputs.wandb_log import check_wandb_installed

        check_wandb_installed()  # without importing it: the run imports it once the cluster starts
    if client is None and not config.run.scheduler and config.deploy.deploy == "local":  # the embedded cluster's
        check_fits_this_machine(config, spaces, config.run.n_dask_workers or workers_needed(config),  # share
                                dataset_steps)
    return spaces
