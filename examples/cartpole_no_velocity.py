"""CartPole without its velocities: a task a feed-forward policy cannot solve and a recurrent one can.

    python examples/cartpole_no_velocity.py                 # --rnn lstm: solves it (mean return >= 475)
    python examples/cartpole_no_velocity.py --rnn none      # the feed-forward policy, for comparison

The observation keeps the cart's position and the pole's angle and drops both velocities, so one observation does
not say where the pole is going: the policy has to remember the last ones (an LSTM core, ``--rnn lstm``). The env
is a gymnasium observation wrapper registered with :func:`daskrl.register_env`; the factory travels to the worker
processes with the run's configuration. Every other option stays at daskrl's global defaults (an LSTM of 64 units:
``--rnn-size`` 0 means 64 for vector observations; truncated BPTT over whole 32-step slots); any option of
``daskrl train`` can be given as ``--option value`` after the example's own.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import daskrl
from daskrl.evaluation import enjoy

ENV = "CartPoleNoVel-v1"


class NoVelocity(gym.ObservationWrapper):
    """CartPole's observation [x, x_dot, theta, theta_dot] without the velocities: [x, theta]."""

    KEEP = [0, 2]

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[self.KEEP], box.high[self.KEEP], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)[self.KEEP]


def cartpole_no_velocity(**kwargs) -> gym.Env:
    """The factory daskrl calls (``render_mode`` among ``kwargs`` when a video is recorded)."""
    return NoVelocity(gym.make("CartPole-v1", **kwargs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rnn", default="lstm", choices=["none", "lstm", "gru"])
    parser.add_argument("--seconds", type=float, default=180.0, help="give up after this many seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--experiment", default="")
    parser.add_argument("--train-dir", default="train_dir")
    parser.add_argument("--no-enjoy", action="store_true", help="skip the evaluation episodes at the end")
    args, extra = parser.parse_known_args()
    overrides = {}
    for flag, value in zip(extra[::2], extra[1::2], strict=True):  # any daskrl option, as --name value
        try:
            overrides[flag.lstrip("-").replace("-", "_")] = json.loads(value)  # numbers, true/false, lists
        except json.JSONDecodeError:
            overrides[flag.lstrip("-").replace("-", "_")] = value  # text

    daskrl.register_env(ENV, cartpole_no_velocity)
    config = daskrl.Config.from_flat({
        **overrides, "env": ENV, "rnn": args.rnn, "seed": args.seed, "train_dir": args.train_dir,
        "experiment": args.experiment or f"cartpole_no_velocity_{args.rnn}_{args.seed}",
        "stop_at_return": 475.0, "train_for_seconds": args.seconds, "train_for_env_steps": 0, "overwrite": True})
    t0 = time.monotonic()
    summary = daskrl.train(config)
    print(f"--rnn {args.rnn}: mean return {summary['episode_return_mean']:.1f} after "
          f"{summary['env_steps']:,} env steps and {time.monotonic() - t0:.0f} s")
    if not args.no_enjoy:
        result = enjoy(summary["experiment_dir"], episodes=10, deterministic=True)
        print(f"evaluation (10 episodes, most likely actions): {result['return_mean']:.1f} "
              f"± {result['return_std']:.1f}")


if __name__ == "__main__":  # worker processes are started fresh: keep the guard
    main()
