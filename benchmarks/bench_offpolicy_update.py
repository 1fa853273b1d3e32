"""The off-policy learners' update alone: updates per second of daskrl's DQN and SAC trainers against SB3's
``train()``, on the same network sizes, minibatch and number of threads, one after the other in one process.

Why: bench_learning's DQN and SAC rows showed daskrl's wall time above SB3's for the same env steps and updates,
and bench_replay showed the update, not replay, is what bounds those runs on a CPU. This measures the update
without sampling, replay or Dask: each trainer is given random minibatches of the env's shapes (daskrl: the
``--replay-batches-per-request`` minibatches of one learner request per call; SB3: as many gradient steps per
``train()`` call from a replay buffer filled by random play), after a warm-up.

daskrl's trainers are built as ``daskrl train --env ENV --algo dqn|sac`` builds them (the algorithm's defaults, the
way bench_learning runs them); SB3's with rl-zoo's hyperparameters for the env. ``--daskrl-options`` adds or
overrides daskrl options (such as ``--value-encoder separate``) for a second daskrl row.

Run:  python benchmarks/bench_offpolicy_update.py [--algo dqn sac] [--threads 1] [--seconds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sb3_offpolicy import RL_ZOO  # noqa: E402

#: the env each algorithm's update is measured on, and its rl-zoo options' minibatch size
ENVS = {"dqn": "MountainCar-v0", "sac": "Pendulum-v1"}
MINIBATCHES_PER_CALL = 8


def daskrl_trainer(algo: str, env: str, extra: list[str]):
    """The trainer ``daskrl train --env ENV --algo ALGO`` builds (its config put through preflight, so the
    algorithm's defaults apply), and the run's config."""
    import tempfile

    from daskrl.algo.dqn.trainer import DQNTrainer
    from daskrl.algo.sac.trainer import SACTrainer
    from daskrl.cli import _config_from_args, build_parser
    from daskrl.driver.launch.preflight import preflight
    from daskrl.models.actor_critic import build_model

    argv = ["train", "--env", env, "--algo", algo, "--train-dir", tempfile.mkdtemp(), *extra]
    config = _config_from_args(build_parser().parse_args(argv))
    spaces = preflight(config)
    model = build_model(spaces, config.model, 0)
    if algo == "dqn":
        return DQNTrainer(model, config.learner, config.algo), config, spaces
    return SACTrainer(model, config.model, config.learner, config.algo), config, spaces


def random_minibatches(spaces, count: int, size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``count`` minibatches of ``size`` transitions of the env's shapes ([count, size, ...] per field)."""
    obs_shape = tuple(spaces.obs_shape)
    if spaces.action_kind == "discrete":
        actions = rng.integers(0, spaces.num_actions, (count, size))
    else:
        low, high = np.asarray(spaces.low, np.float32), np.asarray(spaces.high, np.float32)
        actions = rng.uniform(low, high, (count, size, *low.shape)).astype(np.float32)
    return {"obs": rng.normal(size=(count, size, *obs_shape)).astype(np.float32), "actions": actions,
            "rewards": rng.normal(size=(count, size)).astype(np.float32),
            "next_obs": rng.normal(size=(count, size, *obs_shape)).astype(np.float32),
            "discounts": np.full((count, size), 0.98, np.float32)}


def timed_rate(call, updates_per_call: int, seconds: float, threads: int) -> float:
    """Updates per second of ``call`` on ``threads`` torch threads over about ``seconds``, after a warm-up of a
    tenth of that."""
    import torch

    torch.set_num_threads(threads)
    end = time.perf_counter() + seconds / 10
    while time.perf_counter() < end:
        call()
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        call()
        calls += 1
    return calls * updates_per_call / elapsed


def trained_parameters(optimizers) -> int:
    """Parameters the optimizers train (targets and statistics not counted)."""
    return sum(p.numel() for o in optimizers for group in o.param_groups for p in group["params"])


def measure_daskrl(algo: str, extra: list[str], seconds: float, threads: int) -> dict:
    trainer, config, spaces = daskrl_trainer(algo, ENVS[algo], extra)
    size = config.learner.batch_size
    batches = random_minibatches(spaces, MINIBATCHES_PER_CALL, size, np.random.default_rng(0))
    weights = np.ones((MINIBATCHES_PER_CALL, size), np.float32)
    rate = timed_rate(lambda: trainer.train_many(batches, weights), MINIBATCHES_PER_CALL, seconds, threads)
    return {"updates_per_s": rate, "batch_size": size, "parameters": trained_parameters(trainer.optimizers())}


def measure_sb3(algo: str, seconds: float, threads: int) -> dict | None:
    try:
        from stable_baselines3 import DQN, SAC
    except ImportError:
        return None
    env = ENVS[algo]
    hyper = {**RL_ZOO[algo][env], "learning_starts": 0}
    model = {"dqn": DQN, "sac": SAC}[algo]("MlpPolicy", env, seed=0, policy_kwargs={"net_arch": [256, 256]},
                                           device="cpu", verbose=0, **hyper)
    model.learn(total_timesteps=2_000)  # a replay buffer of random-ish play to draw from
    size = model.batch_size
    rate = timed_rate(lambda: model.train(gradient_steps=MINIBATCHES_PER_CALL, batch_size=size),
                      MINIBATCHES_PER_CALL, seconds, threads)
    optimizers = [model.policy.optimizer] if algo == "dqn" else [model.actor.optimizer, model.critic.optimizer]
    return {"updates_per_s": rate, "batch_size": size, "parameters": trained_parameters(optimizers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", nargs="+", choices=sorted(ENVS), default=sorted(ENVS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both (daskrl's learner: 1 by "
                                                                "default on this project's 2-core machine)")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per row")
    parser.add_argument("--daskrl-options", default="", help="daskrl options for a second daskrl row, such as "
                                                             "'--value-encoder separate'")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()

    results: dict[str, dict] = {}
    for algo in args.algo:
        rows = {"daskrl": measure_daskrl(algo, [], args.seconds, args.threads)}
        if args.daskrl_options:
            rows[f"daskrl {args.daskrl_options}"] = measure_daskrl(algo, args.daskrl_options.split(), args.seconds,
                                                                   args.threads)
        if (sb3 := measure_sb3(algo, args.seconds, args.threads)) is not None:
            rows["sb3"] = sb3
        results[algo] = rows
        print(f"{algo} on {ENVS[algo]} ({args.threads} thread(s), {MINIBATCHES_PER_CALL} minibatches per call):")
        for name, row in rows.items():
            ratio = f"  {row['updates_per_s'] / rows['sb3']['updates_per_s']:.2f}x SB3" if "sb3" in rows else ""
            print(f"  {name:40s} {row['updates_per_s']:8.0f} updates/s  (minibatch {row['batch_size']}, "
                  f"{row['parameters']:,} parameters){ratio}")
    if args.json:
        print(json.dumps({"threads": args.threads, "results": results}))


if __name__ == "__main__":
    main()
