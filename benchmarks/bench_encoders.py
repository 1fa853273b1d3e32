"""Image encoders side by side: the IMPALA ResNet's learner and inference samples/s beside the Nature CNN's, on the
same 84x84x4 frames, in one run, with the ratio of each to the first encoder named.

Run:  python benchmarks/bench_encoders.py [--json] [--encoders cnn,impala] [--steps 4] [--inference-batch 32]
      python benchmarks/bench_encoders.py --frame 36 --samples 64 --batch-size 32 --steps 1 --inference-batch 4
          --inference-iters 2   (a quick check that it runs: tiny sizes, no numbers to keep)

Per encoder and device (the CPU, and each CUDA device):

- ``inference``: ``ActorCritic.act`` on a batch of ``--inference-batch`` frames (a rollout worker's envs, acting
  inline), with ``--threads`` torch threads (1, as a sampler runs) and the encoder in ``--precision`` (``auto``: as a
  sampler on this host would run it, bfloat16 where the CPU has it natively); samples/s over ``--inference-iters``
  calls after a warm-up.
- ``learner``: APPO training steps on a synthetic batch of the Atari family's shape (1,024 samples in 4 minibatches
  of 256 on the CPU, 4,096 in 8 of 512 on a GPU; ``--samples``, ``--batch-size``, ``--epochs`` change it), one
  learner process with ``--threads`` threads, measured as ``benchmarks/bench_learner.py`` measures it.

The learner's cost does not depend on what the frames show, so random frames stand in for a game's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

from bench_learner import Step, _spaces, measure


def inference_rate(step: Step, device: str, batch: int, iters: int, threads: int, precision: str) -> tuple[float, str]:
    """(samples/s of ``act`` on ``batch`` frames, the precision it ran in) for ``step``'s encoder on ``device``."""
    import numpy as np
    import torch

    from daskrl.config import ModelConfig
    from daskrl.models.actor_critic import build_model
    from daskrl.sampling.policies.policy import resolve_precision

    torch.set_num_threads(threads)
    spaces = _spaces(step)
    model = build_model(spaces, ModelConfig(encoder=step.model), seed=0).to(device)
    model.eval()
    if device != "cpu" and precision == "auto":
        precision = "float32"  # a GPU inference worker keeps float32 unless told (daskrl/sampling/policies/policy.py)
    precision = resolve_precision(precision, spaces)
    if precision == "bfloat16":
        model.use_bfloat16_encoders()
    obs = np.random.default_rng(0).integers(0, 256, (batch, *step.obs_shape), dtype=np.uint8)
    model.act(obs)  # warm-up: the first call pays for allocations and kernels
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        model.act(obs)  # returns numpy: the device work is done when it returns
    return batch * iters / (time.perf_counter() - t0), precision


def _ratios(results: list[dict], baseline: str) -> dict[str, dict[str, float]]:
    """Each result's samples/s over the baseline encoder's on the same path and device."""
    base = {(r["path"], r["device"]): r["samples_per_s"] for r in results if r["encoder"] == baseline}
    out: dict[str, dict[str, float]] = {}
    for r in results:
        if r["encoder"] != baseline and (r["path"], r["device"]) in base:
            key = f"{r['encoder']}/{baseline}"
            out.setdefault(key, {})[f"{r['path']} {r['device']}"] = round(r["samples_per_s"] / base[r["path"],
                                                                                                  r["device"]], 3)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoders", default="cnn,impala", help="the first is the baseline of the ratios")
    parser.add_argument("--frame", type=int, default=84, help="side of the square frames (4 stacked channels)")
    parser.add_argument("--steps", type=int, default=4, help="timed learner steps per encoder and device")
    parser.add_argument("--samples", type=int, default=0, help="samples per learner step (default: the family's)")
    parser.add_argument("--batch-size", type=int, default=0, help="samples per minibatch (default: the family's)")
    parser.add_argument("--epochs", type=int, default=1, help="passes over each learner step's samples")
    parser.add_argument("--inference-batch", type=int, default=32, help="frames per act() call")
    parser.add_argument("--inference-iters", type=int, default=50, help="timed act() calls")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both paths")
    parser.add_argument("--precision", default="auto", choices=["auto", "float32", "bfloat16"],
                        help="the encoder's precision for inference (the learner trains in float32)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    return parser


def main() -> None:
    args = _parser().parse_args()
    import torch

    encoders = args.encoders.split(",")
    devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    print(f"encoders on {args.frame}x{args.frame}x4 frames, {os.cpu_count()} cores, {args.threads} thread(s), "
          f"torch {torch.__version__}")
    results = []
    for device in devices:
        for encoder in encoders:
            # the Atari family's frames and batches, trained with this encoder (Step.model is the --encoder name)
            step = dataclasses.replace(Step.of("cnn", device.startswith("cuda"), args.samples, args.batch_size,
                                               args.epochs, args.frame), model=encoder)
            rate, precision = inference_rate(step, device, args.inference_batch, args.inference_iters, args.threads,
                                             args.precision)
            results.append({"encoder": encoder, "path": "inference", "device": device, "precision": precision,
                            "batch": args.inference_batch, "samples_per_s": round(rate, 1)})
            print(f"  inference {device:7s} {encoder:7s} batch {args.inference_batch} in {precision}: "
                  f"{rate:10,.0f} samples/s", flush=True)
            rate = measure(step, device, 1, args.threads, args.steps)
            results.append({"encoder": encoder, "path": "learner", "device": device, "samples": step.samples,
                            "minibatch": step.minibatch, "epochs": step.epochs, "samples_per_s": round(rate, 1)})
            print(f"  learner   {device:7s} {encoder:7s} {step.samples} samples ({step.samples // step.minibatch} x "
                  f"{step.minibatch}) x {step.epochs} epoch(s): {rate:10,.0f} samples/s", flush=True)
    ratios = _ratios(results, encoders[0])
    for key, values in ratios.items():
        print(f"  {key}: " + ", ".join(f"{where} {ratio:.2f}x" for where, ratio in values.items()))
    if args.json:
        print(json.dumps({"benchmark": "encoders", "frame": [args.frame, args.frame, 4], "threads": args.threads,
                          "cores": os.cpu_count(), "results": results, "ratios": ratios}))


if __name__ == "__main__":
    main()
