"""``daskrl enjoy``: load a trained policy from its experiment directory and run episodes with it.

Evaluation runs in the calling process (no cluster): one env, the learner's network and observation
statistics from the checkpoint, actions sampled (or the most likely one with ``deterministic``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from daskrl.config import Config, ConfigError
from daskrl.envs import make_env, probe_env
from daskrl.envs.dict_obs import pack_into
from daskrl.envs.packages import import_env_packages
from daskrl.learning.checkpoints import CheckpointStore, checkpoint_dirs
from daskrl.models.actor_critic import ActorCritic, build_model
from daskrl.models.registry import model_name_problems


def load_policy(experiment_dir: str, which: str = "latest", policy: int = 0):
    """(config, model, checkpoint) of an experiment; ``which`` is 'latest', 'best' or a checkpoint path; ``policy``:
    which of several policies (``--num-policies``)."""
    config = experiment_config(experiment_dir, policy)
    store = CheckpointStore(checkpoint_dirs(experiment_dir, config.policies.num_policies)[policy])
    if which in ("latest", "best") and (store.latest() if which == "latest" else store.best()) is None:
        raise ConfigError([f"experiment {experiment_dir!r} has no {which} checkpoint yet"])
    state = store.load(which)
    model = untrained_model(config)
    model.load_state_dict(state["model"])
    model.eval()
    return config, model, state


def experiment_config(experiment_dir: str, policy: int = 0) -> Config:
    """The config an experiment trained with, refused in one line where there is none or it has no policy
    ``policy``."""
    config_path = os.path.join(experiment_dir, "config.json")
    if not os.path.exists(config_path):
        raise ConfigError([f"{experiment_dir!r} is not a daskrl experiment directory (no config.json): check "
                           "--experiment and --train-dir"])
    with open(config_path) as f:
        config = Config.from_json(f.read())
    policies = config.policies.num_policies
    if not 0 <= policy < policies:
        raise ConfigError([f"--policy {policy}: experiment {experiment_dir!r} trained {policies} "
                           f"polic{'y' if policies == 1 else 'ies'} (0..{policies - 1})"])
    return config


def untrained_model(config: Config) -> ActorCritic:
    """The network ``config`` trains, with its initial weights, in eval mode: what a checkpoint is loaded into (or
    a live run's published weights, for a server that follows it). Single-agent envs only."""
    import_env_packages(config.env.env_packages)  # the ids and model components they register (--env-packages)
    m = config.model
    if problems := model_name_problems(m.encoder, m.rnn, m.key_encoders):  # registered where it trained only
        raise ConfigError(problems)
    spaces = probe_env(config.env.env, config.env.env_kwargs, config.env.obs_keys, config.env.action_mask_key)
    if spaces.num_agents > 1:
        raise ConfigError([f"{config.env.env!r} is a multi-agent env ({spaces.num_agents} agents); enjoy and "
                           "serve play single-agent policies (examples/self_play.py plays a trained policy in a "
                           "PettingZoo game)"])
    model = build_model(spaces, config.model, config.run.seed)
    model.eval()
    return model


def enjoy(experiment_dir: str, episodes: int = 10, which: str = "latest", render: bool = False,
          deterministic: bool = False, seed: int = 12345, max_steps: int = 100_000,
          video: str | None = None, policy: int = 0) -> dict[str, Any]:
    """Run ``episodes`` with a trained policy (``policy``: which of several); with ``video``, record them all to
    that .mp4 file."""
    config, model, state = load_policy(experiment_dir, which, policy)
    if video:
        from daskrl.monitor.video import make_render_env

        env = make_render_env(config.env.env, seed=seed, env_kwargs=config.env.env_kwargs)
    else:
        env = make_env(config.env.env, seed=seed, env_kwargs=config.env.env_kwargs,
                       render_mode="human" if render else None)
    frames: list[np.ndarray] | None = [] if video else None
    try:
        returns, lengths = run_episodes(env, model, episodes, deterministic, max_steps, frames)
        if video:
            from daskrl.monitor.video import video_fps, write_video

            write_video(video, frames, video_fps(env))
    finally:
        env.close()
    return {"episodes": episodes, "return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
            "length_mean": float(np.mean(lengths)), "env_steps_trained": int(state.get("env_steps", 0)),
            "checkpoint": which, "returns": returns, "video": video, "video_frames": len(frames or [])}


def run_episodes(env, model, episodes: int, deterministic: bool, max_steps: int = 100_000,
                 frames: list[np.ndarray] | None = None,
                 stop: Callable[[], bool] | None = None) -> tuple[list[float], list[int]]:
    """Play ``episodes`` whole episodes on ``env`` (one env, one observation at a time: evaluation is about the
    policy, not speed; a recurrent policy's state goes from step to step and starts each episode at zeros); with
    ``frames``, append what ``env.render()`` shows before each step. ``stop`` (asked every
    step) ends early, with the episodes finished so far. Returns (returns, lengths)."""
    discrete = model.spaces.action_kind == "discrete"  # one integer action, as gymnasium's Discrete takes it
    keys = model.spaces.obs_keys  # Dict observations are packed into records, as the samplers store them
    size = model.spaces.obs_shape[0] if keys else 0
    returns, lengths = [], []
    for _ in range(episodes):
        obs, _ = env.reset()
        state = np.zeros((1, model.state_size), np.float32) if model.recurrent else None  # each episode from zeros
        total, steps, done = 0.0, 0, False
        while not done and steps < max_steps:
            if stop is not None and stop():
                return returns, lengths
            if frames is not None:
                frames.append(env.render())
            batch = pack_into(np.zeros(size, np.uint8), obs, keys)[None] if keys else np.asarray(obs)[None]
            if batch.dtype == np.float64:
                batch = batch.astype(np.float32)
            with torch.inference_mode():
                action, _, _ = model.act(batch, deterministic=deterministic, state=state)  # carries the state
            obs, reward, terminated, truncated, _ = env.step(action[0].item() if discrete else action[0])
            total += float(reward)
            steps += 1
            done = terminated or truncated
        returns.append(total)
        lengths.append(steps)
    return returns, lengths


def episode_stats(returns: list[float], lengths: list[int]) -> dict[str, Any]:
    """The mean and spread of played episodes' returns, and their mean length."""
    return {"return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
            "length_mean": float(np.mean(lengths)), "episodes": len(returns)}


def evaluate_weights(config: Config, spaces: Any, weights: dict, episodes: int, deterministic: bool = True,
                     seed: int = 12345) -> dict[str, Any]:
    """Play ``episodes`` with these weights (a learner's ``checkpoint_state()["model"]``) on an env of their own,
    in this process; returns :func:`episode_stats`."""
    if spaces.num_agents > 1:
        raise ConfigError([f"{config.env.env!r} is a multi-agent env; evaluation plays single-agent episodes"])
    model = build_model(spaces, config.model, config.run.seed)
    model.load_state_dict({k: torch.as_tensor(v).cpu() for k, v in weights.items()})  # a GPU learner's too
    model.eval()
    env = make_env(config.env.env, seed=seed, env_kwargs=config.env.env_kwargs)
    try:
        return episode_stats(*run_episodes(env, model, episodes, deterministic))
    finally:
        env.close()
