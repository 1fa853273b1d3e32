"""TensorBoard event writers side by side: daskrl's hand-made writer (daskrl/monitor/outputs/tb_events.py) and
tensorboardX's ``SummaryWriter``, in one run, with each one's ratio to the hand-made writer.

Run:  python benchmarks/bench_tb_writer.py [--json] [--scalars 200000] [--repeats 3]
      python benchmarks/bench_tb_writer.py --scalars 2000 --repeats 1   (a quick check that it runs: no numbers to keep)

Per writer:

- ``import_s``, ``import_mb``: what a driver pays once to import the writer, in a fresh interpreter that has already
  imported numpy and daskrl (as a driver has): wall seconds, and the growth of the process's peak resident memory
  (best of ``--repeats`` interpreters).
- ``scalars_per_s``: ``--scalars`` ``add_scalar`` calls spread over the tags a report writes
  (``tensorboard_log.TAGS``), each value at a step of its own, from a fresh writer to its ``close`` (everything on
  disk), best of ``--repeats``; ``bytes_per_scalar`` of the files; ``records`` read back from the files (every
  scalar and the file's version event, or the writer lost some).
- ``hparams_s``: one HParams record of ten hyperparameters (TensorBoard's HParams dashboard, where trials are
  compared): the hand-made writer's session start (a run's scalars are its metrics), tensorboardX's ``add_hparams``
  with two metrics; ``null`` for a writer without one.

tensorboardX is not a daskrl dependency: where it is not installed its column is skipped with a message
(``pip install tensorboardX``, in a throwaway virtual environment made with ``--system-site-packages``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daskrl.monitor.outputs.tensorboard_log import TAGS

HAND = "hand-made"
TBX = "tensorboardX"
MODULES = {HAND: "daskrl.monitor.outputs.tb_events", TBX: "tensorboardX"}
HPARAMS = {"learning_rate": 3e-4, "gamma": 0.99, "gae_lambda": 0.95, "clip": 0.2, "entropy": 0.01, "epochs": 4,
           "batch_size": 1024, "num_workers": 8, "env": "CartPole-v1", "rnn": False}


def make_writer(name: str, log_dir: str) -> Any:
    """A fresh writer of ``name`` in ``log_dir``."""
    if name == HAND:
        from daskrl.monitor.outputs.tb_events import EventWriter

        return EventWriter(log_dir)
    from tensorboardX import SummaryWriter

    return SummaryWriter(log_dir)


def import_cost(module: str) -> tuple[float, float]:
    """(seconds, MB of peak resident memory) to import ``module`` in a fresh interpreter that has numpy and daskrl."""
    code = ("import resource, time, numpy, daskrl\n"
            "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            f"before, t = peak(), time.perf_counter()\nimport {module}\n"
            "print(time.perf_counter() - t, (peak() - before) / 1024)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, mb = out.stdout.split()
    return float(seconds), float(mb)


def records_in(log_dir: str) -> int:
    """TFRecords in the event files directly in ``log_dir``, read frame by frame (length, its CRC, data, its CRC)."""
    total = 0
    for path in Path(log_dir).glob("events.out.tfevents.*"):
        data, at = path.read_bytes(), 0
        while at + 12 <= len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            at += 12 + length + 4
            total += 1
    return total


def write_scalars(name: str, scalars: int, root: str) -> dict[str, float]:
    """``scalars`` add_scalar calls to a fresh writer through its close: seconds, file bytes and records read back."""
    log_dir = tempfile.mkdtemp(dir=root)
    tags = list(TAGS.values())
    writer = make_writer(name, log_dir)
    started = time.perf_counter()
    for i in range(scalars):
        writer.add_scalar(tags[i % len(tags)], i * 0.5, i // len(tags))
    writer.close()
    seconds = time.perf_counter() - started
    size = sum(p.stat().st_size for p in Path(log_dir).glob("events.out.tfevents.*"))
    return {"seconds": seconds, "bytes": size, "records": records_in(log_dir)}


def hparams_seconds(name: str, root: str) -> float | None:
    """Seconds of one HParams record, or None where the writer writes none: daskrl's session start (the metrics are
    the run's own scalars), or tensorboardX's add_hparams with two metrics."""
    log_dir = tempfile.mkdtemp(dir=root)
    writer = make_writer(name, log_dir)
    started = time.perf_counter()
    if hasattr(writer, "add_session_start"):
        writer.add_session_start(HPARAMS, "bench")
    elif hasattr(writer, "add_hparams"):
        writer.add_hparams(HPARAMS, {"hparam/return_mean": 475.0, "hparam/fps": 9000.0})
    else:
        writer.close()
        return None
    seconds = time.perf_counter() - started
    writer.close()
    return seconds


def measure(name: str, scalars: int, repeats: int, root: str) -> dict[str, Any]:
    """Every number of one writer (see the module docstring)."""
    import_s, import_mb = min(import_cost(MODULES[name]) for _ in range(repeats))  # the first may read a cold disk
    runs = [write_scalars(name, scalars, root) for _ in range(repeats)]
    best = min(runs, key=lambda run: run["seconds"])
    return {"import_s": round(import_s, 4), "import_mb": round(import_mb, 1),
            "scalars_per_s": round(scalars / best["seconds"]), "bytes_per_scalar": round(best["bytes"] / scalars, 1),
            "records": best["records"], "records_expected": scalars + 1,
            "hparams_s": None if (h := hparams_seconds(name, root)) is None else round(h, 4)}


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each writer's scalars/s and import seconds over the hand-made writer's."""
    hand = results[HAND]
    return {name: {"scalars_per_s": round(r["scalars_per_s"] / hand["scalars_per_s"], 2),
                   "import_s": round(r["import_s"] / max(hand["import_s"], 1e-6), 1)}
            for name, r in results.items() if "skipped" not in r}


def table(results: dict[str, dict[str, Any]], ratio: dict[str, dict[str, float]]) -> str:
    lines = [f"{'writer':14} {'import s':>9} {'import MB':>10} {'scalars/s':>10} {'x hand':>7} {'bytes/scalar':>13} "
             f"{'records ok':>10} {'hparams s':>10}"]
    for name, r in results.items():
        if "skipped" in r:
            lines.append(f"{name:14} skipped: {r['skipped']}")
            continue
        hparams = "no" if r["hparams_s"] is None else f"{r['hparams_s']:.4f}"
        lines.append(f"{name:14} {r['import_s']:9.4f} {r['import_mb']:10.1f} {r['scalars_per_s']:10d} "
                     f"{ratio[name]['scalars_per_s']:7.2f} {r['bytes_per_scalar']:13.1f} "
                     f"{str(r['records'] == r['records_expected']):>10} {hparams:>10}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, available: Callable[[str], Any] = importlib.util.find_spec) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scalars", type=int, default=200_000, help="add_scalar calls per writer and repeat")
    parser.add_argument("--repeats", type=int, default=3, help="runs per writer; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_tb_writer_") as root:
        for name in (HAND, TBX):
            if available(MODULES[name]) is None:
                results[name] = {"skipped": f"{name} is not installed (pip install {name}, in a throwaway venv)"}
                continue
            results[name] = measure(name, args.scalars, args.repeats, root)
    ratio = ratios(results)
    print(f"{args.scalars} scalars per writer, best of {args.repeats}; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores")
    print(table(results, ratio))
    result = {"benchmark": "tb_writer", "scalars": args.scalars, "repeats": args.repeats, "writers": results,
              "ratio_to_hand_made": ratio}
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
