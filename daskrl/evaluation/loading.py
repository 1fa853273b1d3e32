"""An experiment's trained policies, read back from its directory: its config, its env's spaces, a policy's
checkpoint and the network that checkpoint fills (built from that policy's own spaces). Shared by ``daskrl enjoy``
on single-agent (:mod:`.episodes`) and multi-agent envs (:mod:`.multi_agent_enjoy`).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from daskrl.config import Config, ConfigError
from daskrl.envs import EnvSpaces, probe_env
from daskrl.envs.packages import import_env_packages
from daskrl.learning.checkpoints import CheckpointStore, checkpoint_dirs
from daskrl.models.actor_critic import build_model
from daskrl.models.registry import model_name_problems


def read_config(experiment_dir: str) -> Config:
    """The config an experiment trained with (its ``config.json``)."""
    config_path = os.path.join(experiment_dir, "config.json")
    if not os.path.exists(config_path):
        raise ConfigError([f"{experiment_dir!r} is not a daskrl experiment directory (no config.json): check "
                           "--experiment and --train-dir"])
    with open(config_path) as f:
        return Config.from_json(f.read())


def experiment_config(experiment_dir: str, policy: int = 0) -> Config:
    """The config an experiment trained with, refused in one line where there is none or it has no policy
    ``policy`` (what a server needs before any checkpoint exists: ``daskrl serve --follow``)."""
    config = read_config(experiment_dir)
    check_policy(experiment_dir, config, policy)
    return config


def check_policy(experiment_dir: str, config: Config, policy: int) -> None:
    policies = config.policies.num_policies
    if not 0 <= policy < policies:
        raise ConfigError([f"--policy {policy}: experiment {experiment_dir!r} trained {policies} "
                           f"polic{'y' if policies == 1 else 'ies'} (0..{policies - 1})"])


def experiment_spaces(config: Config) -> EnvSpaces:
    """The env's spaces, after importing what the run's ``--env-packages`` register (env ids, model parts)."""
    import_env_packages(config.env.env_packages)  # the ids and model components they register (--env-packages)
    m = config.model
    if problems := model_name_problems(m.encoder, m.rnn, m.key_encoders):  # registered where it trained only
        raise ConfigError(problems)
    return probe_env(config.env.env, config.env.env_kwargs, config.env.obs_keys, config.env.action_mask_key)


def load_state(experiment_dir: str, config: Config, which: str = "latest", policy: int = 0) -> dict[str, Any]:
    """Policy ``policy``'s checkpoint (``which``: 'latest', 'best' or a checkpoint path), one readable error when
    there is no such policy or checkpoint."""
    check_policy(experiment_dir, config, policy)
    store = CheckpointStore(checkpoint_dirs(experiment_dir, config.policies.num_policies)[policy])
    if which in ("latest", "best") and (store.latest() if which == "latest" else store.best()) is None:
        raise ConfigError([f"experiment {experiment_dir!r} has no {which} checkpoint yet"])
    return store.load(which)


def policy_model(config: Config, spaces: EnvSpaces, weights: dict, policy: int = 0):
    """Policy ``policy``'s network (built from its own spaces: those of the agents it plays, where a multi-agent
    env's agents differ) with these weights, in eval mode."""
    from daskrl.driver.fleet.role_setups import acting_spaces

    own = acting_spaces(config, spaces)[policy] if spaces.num_agents > 1 else spaces
    model = build_model(own, config.model, config.run.seed)
    model.load_state_dict({k: torch.as_tensor(v).cpu() for k, v in weights.items()})  # a GPU learner's too
    model.eval()
    return model


def untrained_model(config: Config, policy: int = 0):
    """Policy ``policy``'s network as ``config`` trains it, with its initial weights, in eval mode: what a live run's
    published weights are loaded into by a server that follows it (in a multi-agent env, the network of the agents
    that policy plays: a server answers one agent's observations at a time)."""
    from daskrl.driver.fleet.role_setups import acting_spaces

    spaces = experiment_spaces(config)
    own = acting_spaces(config, spaces)[policy] if spaces.num_agents > 1 else spaces
    model = build_model(own, config.model, config.run.seed)
    model.eval()
    return model
