"""Training throughput as rollout workers are added, and across two (network-namespace) hosts.

Run:  python benchmarks/bench_scale.py [--json] [--seconds 15] [--warmup 5]

From one run of this script, each line measured alone, one after the other, on this machine:

- CartPole-v1 training (default options otherwise) with 1, 2 and 3 rollout workers, each on a fresh embedded
  cluster (one learner + the rollout workers, one process each); frames/s is the env-step rate over the
  measured seconds after a warm-up that starts at the first env step (start-up is not measured);
- the same with 2 rollout workers on a cluster of `dask scheduler` + `dask worker` processes in two Linux
  network namespaces ("hosts" 10.77.1.1 and 10.77.1.2, joined by a bridge; the driver reaches them through a
  veth end with 10.77.1.254): learner and one rollout worker on host 1, the other rollout worker on host 2,
  so its trajectories and parameters travel over Dask comms. Needs root (`ip netns add`); skipped with the
  reason otherwise. Only that private range is used, only on links this script creates and deletes.

With --json, one JSON object is printed last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PREFIX, SUBNET = "daskrlb", "10.77.1"  # not the test suite's names/range: both may exist at once
STARTUP_ALLOWANCE_S = 15.0  # cluster start, imports and component creation before the first env step


class WindowProbe:
    """(time, env_steps) from ``train(on_report=...)``; the rate over ``seconds`` after a warm-up that starts at
    the first report with env steps (so start-up, which differs between setups, is not measured)."""

    def __init__(self, warmup: float, seconds: float) -> None:
        self.warmup, self.seconds = warmup, seconds
        self.points: list[tuple[float, int]] = []

    def __call__(self, row: dict) -> None:
        if row["env_steps"] > 0:
            self.points.append((time.monotonic(), int(row["env_steps"])))

    def rate(self) -> tuple[float, float]:
        """(frames/s, seconds actually measured)."""
        if len(self.points) < 2:
            return 0.0, 0.0
        start = self.points[0][0] + self.warmup
        window = [p for p in self.points if start <= p[0] <= start + self.seconds + 0.5] or self.points[-2:]
        if len(window) < 2:
            window = self.points[-2:]
        (t0, s0), (t1, s1) = window[0], window[-1]
        return ((s1 - s0) / (t1 - t0) if t1 > t0 else 0.0), t1 - t0


def measure(seconds: float, warmup: float, **options) -> dict:
    from daskrl.config import Config
    from daskrl.runner import train

    tmp = tempfile.mkdtemp(prefix="daskrl_scale_")
    try:
        config = Config().replace(train_dir=tmp, experiment="scale", dashboard_address="", report_interval=1.0,
                                  train_for_seconds=STARTUP_ALLOWANCE_S + warmup + seconds, train_for_env_steps=0,
                                  **options)
        probe = WindowProbe(warmup, seconds)
        summary = train(config, on_report=probe)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    path = summary.get("data_path", {})
    fps, window = probe.rate()
    return {"fps": fps, "window_s": round(window, 1), "return": summary["episode_return_mean"],
            "env_steps": summary["env_steps"], "slots_shm": path.get("slots_shm", 0),
            "slots_comms": path.get("slots_comms", 0), "params_comms_reads": path.get("params_comms_reads", 0)}


# ---- two hosts in network namespaces ----


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if check and out.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return out


def netns_down() -> None:
    for ns in (f"{PREFIX}_h1", f"{PREFIX}_h2"):
        _ip("netns", "del", ns, check=False)
    _ip("link", "del", f"{PREFIX}_r0", check=False)


def netns_up() -> tuple[str, str]:
    h1, h2, p = f"{PREFIX}_h1", f"{PREFIX}_h2", PREFIX
    netns_down()
    for ns in (h1, h2):
        _ip("netns", "add", ns)
        _ip("link", "set", "lo", "up", ns=ns)
    _ip("link", "add", f"{p}_br", "type", "bridge", ns=h1)
    _ip("addr", "add", f"{SUBNET}.1/24", "dev", f"{p}_br", ns=h1)
    _ip("link", "set", f"{p}_br", "up", ns=h1)
    _ip("link", "add", f"{p}_a2", "netns", h1, "type", "veth", "peer", "name", f"{p}_b2", "netns", h2)
    _ip("link", "set", f"{p}_a2", "master", f"{p}_br", "up", ns=h1)
    _ip("addr", "add", f"{SUBNET}.2/24", "dev", f"{p}_b2", ns=h2)
    _ip("link", "set", f"{p}_b2", "up", ns=h2)
    _ip("link", "add", f"{p}_r0", "type", "veth", "peer", "name", f"{p}_r1", "netns", h1)
    _ip("link", "set", f"{p}_r1", "master", f"{p}_br", "up", ns=h1)
    _ip("addr", "add", f"{SUBNET}.254/24", "dev", f"{p}_r0")
    _ip("link", "set", f"{p}_r0", "up")
    return h1, h2


def measure_two_hosts(seconds: float, warmup: float) -> dict:
    if shutil.which("ip") is None:
        raise RuntimeError("the `ip` command (iproute2) is not installed")
    from distributed import Client

    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    dask = dask if os.path.exists(dask) else (shutil.which("dask") or "dask")
    procs: list[subprocess.Popen] = []
    logs = tempfile.mkdtemp(prefix="daskrl_scale_logs_")
    address = f"tcp://{SUBNET}.1:8786"

    def on(ns: str, *args: str) -> None:
        with open(os.path.join(logs, f"{len(procs)}.log"), "w") as log:
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, dask, *args], stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    try:
        h1, h2 = netns_up()
        on(h1, "scheduler", "--host", f"{SUBNET}.1", "--port", "8786", "--dashboard-address", f"{SUBNET}.1:8787")
        one = ["--nworkers", "1", "--nthreads", "1"]
        on(h1, "worker", address, "--host", f"{SUBNET}.1", *one, "--name", "a-learner", "--resources", "learner=1")
        on(h1, "worker", address, "--host", f"{SUBNET}.1", *one, "--name", "a-rollout")
        on(h2, "worker", address, "--host", f"{SUBNET}.2", *one, "--name", "b-rollout")
        deadline = time.monotonic() + 120
        while True:
            try:
                with Client(address, timeout=5) as client:
                    client.wait_for_workers(3, timeout=max(1.0, deadline - time.monotonic()))
                break
            except OSError:
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"the two-host cluster did not start (logs in {logs})") from None
                time.sleep(0.5)
        return measure(seconds, warmup, scheduler=address, num_workers=2)
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        netns_down()
        shutil.rmtree(logs, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per line (after the warm-up)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of each run not measured")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3], help="rollout worker counts")
    parser.add_argument("--no-two-hosts", action="store_true", help="skip the network-namespace line")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()

    from daskrl.runtime.cluster import prestart_worker_server

    prestart_worker_server()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines: dict[str, dict] = {}
    for n in args.workers:
        lines[f"embedded_{n}"] = {"setup": "embedded LocalCluster, 1 host", "rollout_workers": n,
                                  **measure(args.seconds, args.warmup, num_workers=n)}
    skipped = ""
    if not args.no_two_hosts:
        try:
            lines["two_hosts_2"] = {"setup": "dask CLI, 2 netns hosts", "rollout_workers": 2,
                                    **measure_two_hosts(args.seconds, args.warmup)}
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            skipped = f"two hosts skipped: {exc}"

    print(f"\nCartPole-v1 training, frames/s (env steps) over {args.seconds:g} s after a {args.warmup:g} s warm-up "
          f"from the first env step; {cores} cores; one learner process besides the rollout workers\n")
    print("| setup | rollout workers | frames/s | mean return at the end | slots via shm / comms |")
    print("|---|---|---|---|---|")
    for line in lines.values():
        print(f"| {line['setup']} | {line['rollout_workers']} | {line['fps']:,.0f} | {line['return']:.1f} | "
              f"{line['slots_shm']:,} / {line['slots_comms']:,} |")
    if skipped:
        print(f"\n({skipped})")
    if args.json:
        print(json.dumps({"cores": cores, "seconds": args.seconds, "warmup": args.warmup, "skipped": skipped,
                          "lines": {k: {**v, "fps": round(v["fps"]),
                                        "return": None if math.isnan(v["return"]) else round(v["return"], 1)}
                                    for k, v in lines.items()}}))


if __name__ == "__main__":
    main()
