"""``daskrl enjoy``: load a trained policy from its experiment directory and run episodes with it.

Evaluation runs in the calling process (no cluster): one env, the learner's network and observation
statistics from the checkpoint, actions sampled (or the most likely one with ``deterministic``). A multi-agent
env's games are seated and played by :mod:`.multi_agent_enjoy`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from daskrl.config import Config, ConfigError
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.envs import make_env
from daskrl.envs.curriculum_env import reached_task
from daskrl.envs.layouts.dict_obs import pack_into
from daskrl.evaluation.loading import experiment_spaces, load_state, policy_model, read_config
from daskrl.models.actor_critic import build_model


def load_policy(experiment_dir: str, which: str = "latest", policy: int = 0):
    """(config, model, checkpoint) of an experiment; ``which`` is 'latest', 'best' or a checkpoint path; ``policy``:
    which of several policies (``--num-policies``). In a multi-agent env, the network is the one that policy plays
    its agents with."""
    config = read_config(experiment_dir)
    spaces = experiment_spaces(config)
    state = load_state(experiment_dir, config, which, policy)
    return config, policy_model(config, spaces, state["model"], policy), state


def training_done(config: Config, state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint was trained for: env steps, learner updates, and whether its run was offline (it took no
    env step: its progress is its updates)."""
    return {"env_steps_trained": int(state.get("env_steps", 0)), "updates_trained": int(state.get("train_steps", 0)),
            "offline": algorithm_of(config).offline}


def trained_for(result: dict[str, Any]) -> str:
    """How the CLI and a model card say what a policy was trained for (``result``: :func:`training_done`'s keys)."""
    if result.get("offline"):
        return f"{result['updates_trained']:,} updates from its dataset"
    return f"{result['env_steps_trained']:,} env steps"


def enjoy(experiment_dir: str, episodes: int = 10, which: str = "latest", render: bool = False,
          deterministic: bool = False, seed: int = 12345, max_steps: int = 100_000,
          video: str | None = None, policy: int | None = None, opponent: str | None = None,
          seat: str | None = None) -> dict[str, Any]:
    """Run ``episodes`` with a trained policy (``policy``: which of several); with ``video``, record them all to
    that .mp4 file. A multi-agent env's games are played by :func:`daskrl.evaluation.multi_agent_enjoy.enjoy_games`
    (``opponent`` and ``seat`` apply to two-player games there). A curriculum's experiment plays the task its
    checkpoint had reached."""
    config = read_config(experiment_dir)
    spaces = experiment_spaces(config)
    if spaces.num_agents > 1:
        from daskrl.evaluation.multi_agent_enjoy import enjoy_games

        return enjoy_games(experiment_dir, config, spaces, episodes, which, render=render,
                           deterministic=deterministic, seed=seed, max_steps=max_steps, video=video, policy=policy,
                           opponent=opponent, seat=seat)
    if opponent is not None or seat is not None:
        raise ConfigError([f"--opponent and --seat choose who plays a two-player game; {config.env.env!r} is a "
                           "single-agent env: leave them out"])
    policy = policy or 0
    deterministic = deterministic or algorithm_of(config).acts_greedily
    state = load_state(experiment_dir, config, which, policy)
    model = policy_model(config, spaces, state["model"], policy)
    if video:
        from daskrl.monitor.outputs.video import make_render_env

        env = reached_task(config.env, state.get("curriculum"),
                           lambda spec: make_render_env(spec, seed=seed, env_kwargs=config.env.env_kwargs))
    else:
        env = reached_task(config.env, state.get("curriculum"),
                           lambda spec: make_env(spec, seed=seed, env_kwargs=config.env.env_kwargs,
                                                 render_mode="human" if render else None))
    frames: list[np.ndarray] | None = [] if video else None
    try:
        returns, lengths = run_episodes(env, model, episodes, deterministic, max_steps, frames)
        if video:
            from daskrl.monitor.outputs.video import video_fps, write_video

            write_video(video, frames, video_fps(env))
    finally:
        env.close()
    return {"episodes": episodes, "return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
            "length_mean": float(np.mean(lengths)), **training_done(config, state), "checkpoint": which,
            "returns": returns, "video": video, "video_frames": len(frames or [])}


def run_episodes(env, model, episodes: int, deterministic: bool, max_steps: int = 100_000,
                 frames: list[np.ndarray] | None = None,
                 stop: Callable[[], bool] | None = None) -> tuple[list[float], list[int]]:
    """Play ``episodes`` whole episodes on ``env`` (one env, one observation at a time: evaluation is about the
    policy, not speed; a recurrent policy's state goes from step to step and starts each episode at zeros); with
    ``frames``, append what ``env.render()`` shows before each step. ``stop`` (asked every
    step) ends early, with the episodes finished so far. Returns (returns, lengths)."""
    discrete = model.spaces.action_kind == "discrete"  # one integer action, as gymnasium's Discrete takes it
    layout = model.spaces.action_layout  # Tuple or Dict actions: the flat row becomes the env's structure
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
            act = action[0].item() if discrete else action[0] if layout is None else layout.to_env(action[0])
            obs, reward, terminated, truncated, _ = env.step(act)
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
        raise ConfigError([f"{config.env.env!r} is a multi-agent env; these weights are one policy's, and its games "
                           "need every agent's: evaluate with --eval-interval-env-steps or daskrl enjoy"])
    model = build_model(spaces, config.model, config.run.seed)
    model.load_state_dict({k: torch.as_tensor(v).cpu() for k, v in weights.items()})  # a GPU learner's too
    model.eval()
    env = make_env(config.env.env, seed=seed, env_kwargs=config.env.env_kwargs)
    try:
        return episode_stats(*run_episodes(env, model, episodes, deterministic))
    finally:
        env.close()
