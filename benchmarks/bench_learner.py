"""Training throughput of the learner alone: samples per second of APPO training steps, per model, device and
learner count.

Run:  python benchmarks/bench_learner.py [--json] [--steps 6] [--models mlp,cnn,impala]
      python benchmarks/bench_learner.py --models cnn --samples 1024 --batch-size 256 --epochs 1 --frame 84
          --runs 1x1,1x2   (one candidate training step: its shape, passes and frame size; learners x threads)
      python benchmarks/bench_learner.py --runs 1x1 --baseline /path/to/older/checkout
          (each configuration also with another source tree's daskrl, measured just before this one's: the ratio)

Models: ``mlp`` is the CartPole policy (4 floats in, two 64-unit tanh MLPs) on batches of the default size (4,096
samples: 8 minibatches of 512); ``cnn`` is the Nature CNN on Atari frames (84x84x4 uint8, 6 actions) on 1,024-sample
batches (4 minibatches of 256) on the CPU and 4,096 on a GPU; ``impala`` is the IMPALA ResNet (``--encoder impala``)
on the same frames and batches (benchmarks/bench_encoders.py sets it beside the Nature CNN, learner and inference).
Each line is one configuration, measured alone, one after the other, on a synthetic batch of the model's shape (the
learner's cost does not depend on what the samples say):

- ``1 learner, t threads``: one process trains with ``torch.set_num_threads(t)`` (t = 1 and every core);
- ``K learners``: K processes (one thread each) form a gloo group on loopback (``daskrl.learning.group.learner_group``)
  and each trains on 1/K of every batch, gradients summed every minibatch, as ``--num-learners K`` does;
- every device present: the CPU, and each CUDA device (``--learner-device cuda:N``).

samples/s = samples of the whole batch x steps / seconds of the slowest member, after one warm-up step; a step
trains ``--epochs`` passes over its samples (plus the one forward pass that computes V-trace's targets), so with
more epochs a sample costs more. ``--samples``, ``--batch-size``, ``--epochs`` and ``--frame`` (the CNN's square frame
side, or a whole HxWxC shape such as Doom's 72x128x3) replace a model's defaults, to price a candidate configuration
(the Atari family's in daskrl/config/env_defaults.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from typing import Any

MODELS = {
    # name (the --encoder it trains with): (observation shape, dtype, actions, samples per batch on CPU / GPU,
    # minibatch on CPU / GPU)
    "mlp": ((4,), "float32", 2, (4096, 4096), (512, 512)),
    "cnn": ((84, 84, 4), "uint8", 6, (1024, 4096), (256, 512)),
    "impala": ((84, 84, 4), "uint8", 6, (1024, 4096), (256, 512)),
}
ROLLOUT = 32  # time steps per env column of a batch


@dataclass(frozen=True)
class Step:
    """One configuration's training step: what the learner sees and how it trains on it (plain data: it travels
    to the spawned learner processes)."""

    model: str
    obs_shape: tuple[int, ...]
    dtype: str
    actions: int
    samples: int  # per step, over the whole group
    minibatch: int
    epochs: int

    @classmethod
    def of(cls, model: str, gpu: bool, samples: int = 0, minibatch: int = 0, epochs: int = 1,
           frame: str = "") -> Step:
        shape, dtype, actions, batch, mb = MODELS[model]
        if frame and len(shape) == 3:
            sides = [int(x) for x in frame.split("x")]
            shape = (sides[0], sides[0], shape[2]) if len(sides) == 1 else tuple(sides)  # type: ignore[assignment]
        return cls(model, shape, dtype, actions, samples or batch[gpu], minibatch or mb[gpu], epochs)


def _named(*places: str) -> Any:
    """The first of ``module:name`` places that imports: a --baseline tree from before the house's moves (issue 59)
    keeps the same class or function at its older path."""
    import importlib

    for place in places:
        module, name = place.split(":")
        try:
            return getattr(importlib.import_module(module), name)
        except ImportError:
            continue
    raise ImportError(f"none of {places} imports")


def _spaces(step: Step):
    import gymnasium as gym
    import numpy as np

    EnvSpaces = _named("daskrl.envs.layouts.spaces:EnvSpaces", "daskrl.envs.spaces:EnvSpaces")  # noqa: N806

    high = 255 if step.dtype == "uint8" else np.inf
    obs = gym.spaces.Box(0 if step.dtype == "uint8" else -np.inf, high, step.obs_shape, dtype=np.dtype(step.dtype))
    return EnvSpaces.from_spaces(obs, gym.spaces.Discrete(step.actions))


def _batch(step: Step, columns: int, seed: int):
    import numpy as np

    TrajectoryBatch = _named("daskrl.algo.appo.trainer:TrajectoryBatch", "daskrl.algo.trainer:TrajectoryBatch")  # noqa: N806

    rng = np.random.default_rng(seed)
    shape = (ROLLOUT + 1, columns, *step.obs_shape)
    obs = rng.integers(0, 255, shape, dtype=np.uint8) if step.dtype == "uint8" \
        else rng.normal(size=shape).astype(np.float32)
    return TrajectoryBatch(obs=obs, actions=rng.integers(0, step.actions, (ROLLOUT, columns)),
                           rewards=rng.normal(size=(ROLLOUT, columns)).astype(np.float32),
                           dones=rng.random((ROLLOUT, columns)) < 0.02,
                           log_probs=np.full((ROLLOUT, columns), -np.log(step.actions), np.float32),
                           policy_version=np.zeros((ROLLOUT, columns), np.int64))


def _member(step: Step, device: str, rank: int, world: int, threads: int, steps: int, port: int, out,
            source: str | None = None) -> None:
    """One learner process: build, join the group (if any), one warm-up step, then ``steps`` timed steps; with
    ``source``, the daskrl of that source tree."""
    if source:
        import sys

        sys.path.insert(0, source)
    import torch

    from daskrl.config import Config
    from daskrl.models.actor_critic import build_model

    APPOTrainer = _named("daskrl.algo.appo.trainer:APPOTrainer", "daskrl.algo.trainer:APPOTrainer")  # noqa: N806
    LearnerGroup = _named("daskrl.learning.group.learner_group:LearnerGroup",  # noqa: N806
                          "daskrl.learning.learner_group:LearnerGroup")
    open_store = _named("daskrl.learning.group.learner_group:open_store", "daskrl.learning.learner_group:open_store")
    torch.set_num_threads(threads)
    try:  # what a learner process does at its start, in trees that have it
        _named("daskrl.runtime.memory.heap:keep_freed_memory", "daskrl.runtime.heap:keep_freed_memory")()
    except ImportError:
        pass
    gpu = device.startswith("cuda")
    cfg = Config().replace(batch_size=step.minibatch, num_batches_per_epoch=max(1, step.samples // step.minibatch),
                           num_epochs=step.epochs, encoder=step.model)
    trainer = APPOTrainer(build_model(_spaces(step), cfg.model, seed=0), cfg.learner, 0, torch.device(device))
    if world > 1:
        store = open_store("127.0.0.1", world) if rank == 0 else None
        if rank == 0:
            out.put(("port", store.port))
            port = None
        trainer.group = LearnerGroup("127.0.0.1", port or 0, rank, world, 1, torch.device(device), store=store)
    batch = _batch(step, max(1, step.samples // ROLLOUT // world), seed=rank)
    trainer.train(batch, 0)
    trainer.group.sum_(torch.zeros(1, device=device))  # everyone warmed up: start together
    if gpu:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.train(batch, 0)
    if gpu:
        torch.cuda.synchronize()
    out.put(("time", time.perf_counter() - t0))


def measure(step: Step, device: str, world: int, threads: int, steps: int, source: str | None = None) -> float:
    """Samples per second of the whole group on ``step`` (with ``source``: that source tree's daskrl)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    first = ctx.Process(target=_member, args=(step, device, 0, world, threads, steps, 0, out, source))
    first.start()
    procs = [first]
    if world > 1:
        kind, port = out.get(timeout=120)
        assert kind == "port"
        for rank in range(1, world):
            procs.append(ctx.Process(target=_member, args=(step, device, rank, world, threads, steps, port, out,
                                                           source)))
            procs[-1].start()
    times = [out.get(timeout=600)[1] for _ in procs]
    for p in procs:
        p.join(30)
    return step.samples * steps / max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed training steps per configuration")
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--samples", type=int, default=0, help="samples per training step (default: the model's)")
    parser.add_argument("--batch-size", type=int, default=0, help="samples per minibatch (default: the model's)")
    parser.add_argument("--epochs", type=int, default=1, help="passes over each step's samples")
    parser.add_argument("--frame", default="",
                        help="CNN: side of square frames (default 84), or a whole frame shape HxWxC (Doom: 72x128x3)")
    parser.add_argument("--runs", default="",
                        help="learners x threads to measure, such as 1x1,1x2 (default: 1x1, 1 x every core, 2x1)")
    parser.add_argument("--baseline", default=None,
                        help="another source tree (a checkout's root): each configuration is measured with its daskrl "
                             "just before this one's, and the ratio printed")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    import torch

    cores = os.cpu_count() or 1
    devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    results = []
    print(f"learner training throughput, {args.steps} timed steps each, {cores} cores, torch {torch.__version__}")
    for model in args.models.split(","):
        for device in devices:
            step = Step.of(model, device.startswith("cuda"), args.samples, args.batch_size, args.epochs, args.frame)
            runs = [tuple(int(x) for x in r.split("x")) for r in args.runs.split(",")] if args.runs else \
                [(1, 1)] + ([(1, cores)] if cores > 1 and device == "cpu" else []) + [(2, 1)]
            base = None
            for world, threads in runs:
                older = measure(step, device, world, threads, args.steps, args.baseline) if args.baseline else None
                rate = measure(step, device, world, threads, args.steps)
                base = base or rate
                row = {"model": model, "device": device, "learners": world, "threads": threads,
                       "obs_shape": list(step.obs_shape), "samples": step.samples, "minibatch": step.minibatch,
                       "epochs": step.epochs, "samples_per_s": round(rate, 1), "vs_first_run": round(rate / base, 3)}
                against = ""
                if older is not None:
                    row.update(baseline_samples_per_s=round(older, 1), vs_baseline=round(rate / older, 3))
                    against = f"; baseline {older:10,.0f}: {rate / older:.2f}x"
                results.append(row)
                print(f"  {model:6s} {device:7s} {'x'.join(map(str, step.obs_shape)):>9s} {step.samples} samples "
                      f"({step.samples // step.minibatch} x {step.minibatch}) x {step.epochs} epoch(s), {world} "
                      f"learner(s) x {threads} thread(s): {rate:10,.0f} samples/s ({rate / base:.2f}x){against}",
                      flush=True)
    if args.json:
        print(json.dumps({"benchmark": "learner", "cores": cores, "steps": args.steps, "baseline": args.baseline,
                          "results": results}))


if __name__ == "__main__":
    main()
