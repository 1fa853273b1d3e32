"""Datasets as a user makes them, each command in a process of its own: ``daskrl train --record-dataset`` and
``daskrl record`` write Minari datasets that a fresh interpreter loads with ``minari.load_dataset``, and whose
episodes are what ``daskrl enjoy``'s policy plays from the same first state; a dataset id taken refuses the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..helpers import slow

pytest.importorskip("minari", reason="the datasets extra is not installed: pip install 'daskrl[datasets]'")

DASKRL = [sys.executable, "-m", "daskrl"]

#: run in a fresh interpreter: load the dataset, replay each episode's first state with enjoy's policy (the
#: checkpoint's most likely actions), print what a test compares
CHECK = r"""
import json, sys
import numpy as np, gymnasium as gym, minari, torch
from daskrl.evaluation.episodes import load_policy
dataset = minari.load_dataset(sys.argv[1])
config, model, _ = load_policy(sys.argv[2])
env = gym.make("Pendulum-v1").unwrapped
env.reset(seed=0)
recorded, replayed, steps = [], [], 0
for episode in dataset.iterate_episodes():
    cos, sin, speed = episode.observations[0].astype(np.float64)
    env.state = np.array([np.arctan2(sin, cos), speed])
    obs, total = env._get_obs(), 0.0
    for _ in range(len(episode.rewards)):
        with torch.inference_mode():
            action, _, _ = model.act(np.asarray(obs, np.float32)[None], deterministic=True)
        obs, reward, *_ = env.step(np.asarray(action[0]))
        total += reward
    recorded.append(float(episode.rewards.sum()))
    replayed.append(total)
    steps += len(episode.rewards)
print(json.dumps({"episodes": dataset.total_episodes, "steps": dataset.total_steps, "counted": steps,
                  "recorded": recorded, "replayed": replayed, "env": dataset.spec.env_spec.id,
                  "obs_shape": list(dataset.observation_space.shape), "truncated": bool(episode.truncations[-1])}))
"""


def run(args: list[str], env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(DASKRL + args, capture_output=True, text=True, timeout=timeout, env=env)


@slow("trains SAC on Pendulum, records a dataset with the trained policy and loads it in a fresh interpreter")
def test_record_plays_the_trained_policy_into_a_dataset_a_fresh_interpreter_loads(tmp_path):
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "datasets")}
    train_dir = str(tmp_path / "runs")
    out = run(["train", "--env", "Pendulum-v1", "--algo", "sac", "--train-for-env-steps", "1200",
               "--learning-starts", "400", "--replay-ratio", "0.05", "--num-workers", "1", "--num-envs-per-worker",
               "4", "--train-dir", train_dir, "--experiment", "pendulum", "--record-dataset", "test/pendulum/replay-v0",
               "--dashboard-address", ""], env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "into Minari dataset test/pendulum/replay-v0" in out.stdout
    out = run(["record", "--experiment", "pendulum", "--train-dir", train_dir, "--episodes", "6", "--dataset-id",
               "test/pendulum/expert-v0", "--deterministic", "--num-envs-per-worker", "4"], env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "wrote 6 episodes (1,200 steps) into Minari dataset test/pendulum/expert-v0" in out.stdout
    assert "daskrl: sampling with the policy of" in out.stdout
    check = subprocess.run([sys.executable, "-c", CHECK, "test/pendulum/expert-v0",
                            os.path.join(train_dir, "pendulum")], capture_output=True, text=True, env=env,
                           timeout=120)
    assert check.returncode == 0, check.stderr[-2000:]
    found = json.loads(check.stdout.strip().splitlines()[-1])
    assert (found["episodes"], found["steps"], found["counted"]) == (6, 1200, 1200)
    assert found["env"] == "Pendulum-v1" and found["obs_shape"] == [3] and found["truncated"]
    # each episode is what enjoy's policy plays from its first state (the observation's float32 rounding of the
    # angle may move a return by a little: 200 expert episodes differed by 0.03% at the median, 1.4% at most)
    for recorded, replayed in zip(found["recorded"], found["replayed"], strict=True):
        assert abs(recorded - replayed) <= 0.05 * abs(replayed), (found["recorded"], found["replayed"])
    mean_recorded, mean_replayed = (sum(found[k]) / 6 for k in ("recorded", "replayed"))
    assert abs(mean_recorded - mean_replayed) <= 0.01 * abs(mean_replayed)
    assert len(set(found["recorded"])) == 6  # six envs' own first states, not one episode six times
    # what training sampled: every whole episode, the same dataset format
    replay = subprocess.run([sys.executable, "-c", "import minari, sys; d = minari.load_dataset(sys.argv[1]); "
                             "print(d.total_episodes, d.total_steps)", "test/pendulum/replay-v0"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert replay.returncode == 0, replay.stderr[-2000:]
    episodes, steps = map(int, replay.stdout.split())
    assert episodes >= 4 and steps == 200 * episodes  # each of the 4 envs finished its first episode at least
    # a dataset id already taken: refused in one line before anything starts, the dataset untouched
    out = run(["record", "--experiment", "pendulum", "--train-dir", train_dir, "--episodes", "2", "--dataset-id",
               "test/pendulum/expert-v0"], env, timeout=60)
    assert out.returncode == 2 and "a dataset with that id exists" in out.stderr and "Traceback" not in out.stderr
