"""Play episodes with a policy that ``daskrl export`` wrote to ONNX, with onnxruntime and gymnasium only: no daskrl
and no torch are imported, as on a machine that runs the policy in the world.

    daskrl train --env CartPole-v1 --experiment cartpole --stop-at-return 475
    daskrl export --experiment cartpole --format onnx
    python examples/onnx_play.py train_dir/cartpole/export/policy_0_latest.onnx --episodes 5

The file says which env it was trained on (its ``daskrl`` metadata entry); ``--env`` plays another gymnasium id with
the same spaces. A recurrent policy's state starts each episode at zeros and goes from each step to the next; a
Dict observation is fed key by key (docs/export.md lists the inputs and outputs).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import gymnasium as gym
import numpy as np
import onnxruntime

#: onnxruntime's type names -> numpy dtypes (the inputs' dtypes are the env's own)
DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
          "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
STATE_IN, STATE_OUT = "rnn_state", "next_rnn_state"


def observation_feed(obs: Any, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """One observation as a batch of one per input: ``obs`` for a Box observation, one entry per key of a Dict
    observation (``outer/inner`` names a key of a nested Dict)."""
    feed = {}
    for name, spec in inputs.items():
        if name == STATE_IN:
            continue
        if name == "obs" and not isinstance(obs, dict):
            value = obs
        elif name in obs:
            value = obs[name]
        else:
            outer, _, inner = name.partition("/")
            value = obs[outer][inner]
        feed[name] = np.asarray(value, dtype=DTYPES[spec.type])[None]
    return feed


def play(session: onnxruntime.InferenceSession, env: gym.Env, seed: int, max_steps: int) -> tuple[float, int]:
    """One episode with the most likely actions -> (return, steps)."""
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    state = np.zeros((1, inputs[STATE_IN].shape[1]), np.float32) if STATE_IN in inputs else None
    obs, _ = env.reset(seed=seed)
    total, steps, done = 0.0, 0, False
    while not done and steps < max_steps:
        feed = observation_feed(obs, inputs)
        if state is not None:
            feed[STATE_IN] = state
        result = dict(zip(outputs, session.run(None, feed), strict=True))
        state = result.get(STATE_OUT)
        action = result["action"][0]
        obs, reward, terminated, truncated, _ = env.step(action.item() if action.ndim == 0 else action)
        total += float(reward)
        steps += 1
        done = terminated or truncated
    return total, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the .onnx file daskrl export wrote")
    parser.add_argument("--env", default=None, help="gymnasium id to play (default: the one the policy trained on)")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="episode k is reset with seed + k")
    parser.add_argument("--max-steps", type=int, default=10_000)
    args = parser.parse_args()
    session = onnxruntime.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    trained = json.loads(session.get_modelmeta().custom_metadata_map.get("daskrl", "{}"))
    env = gym.make(args.env or trained["env"], **(trained.get("env_kwargs") or {}))
    try:
        returns = []
        for k in range(args.episodes):
            total, steps = play(session, env, args.seed + k, args.max_steps)
            returns.append(total)
            print(f"episode {k}: return {total:.1f} in {steps} steps")
    finally:
        env.close()
    print(f"mean return {np.mean(returns):.2f} over {len(returns)} episodes")


if __name__ == "__main__":
    main()
