"""Training throughput as rollout workers are added, and across two (network-namespace) hosts.

Run:  python benchmarks/bench_scale.py [--json] [--seconds 15] [--warmup 5] [--grow-hosts 4 --grow-period 20]
      python benchmarks/bench_scale.py --simulate 8 32 64 [--designs off auto] [--json]   (scale_simulation.py)
      python benchmarks/bench_scale.py --links [--links-envs CartPole-v1 atari/Pong] [--json]   (scale_links.py)

From one run of this script, each line measured alone, one after the other, on this machine:

- CartPole-v1 training (default options otherwise) with 1, 2 and 3 rollout workers, each on a fresh embedded
  cluster (one learner + the rollout workers, one process each); frames/s is the env-step rate over the
  measured seconds after a warm-up that starts at the first env step (start-up is not measured);
- the same with 2 rollout workers on a cluster of `dask scheduler` + `dask worker` processes in two Linux
  network namespaces ("hosts" 10.77.1.1 and 10.77.1.2, joined by a bridge; the driver reaches them through a
  veth end with 10.77.1.254): learner and one rollout worker on host 1, the other rollout worker on host 2,
  so its trajectories and parameters travel over Dask comms. Needs root (`ip netns add`); skipped with the
  reason otherwise. Only that private range is used, only on links this script creates and deletes;
- with ``--grow-hosts N``: one elastic run that starts on host 1 (learner and one rollout worker) while hosts
  2..N (namespaces like the above) join one every ``--grow-period`` seconds, each with one ``dask worker`` that the
  run gives a rollout worker; frames/s over each stretch with k hosts. On one machine the "hosts" share its
  cores: this checks the mechanics and the cost of comms, the model in docs/deployment.md predicts real hosts.

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

sys.path.insert(0, os.path.dirname(__file__))
from common import stop_if_signalled  # noqa: E402

from daskrl.testing.hosts.netns import bridge_hosts, remove_hosts  # noqa: E402

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


def measure(seconds: float, warmup: float, probe: WindowProbe | None = None, **options) -> dict:
    from daskrl import train
    from daskrl.config import Config

    tmp = tempfile.mkdtemp(prefix="daskrl_scale_")
    try:
        config = Config().replace(train_dir=tmp, experiment="scale", dashboard_address="", report_interval=1.0,
                                  train_for_seconds=STARTUP_ALLOWANCE_S + warmup + seconds, train_for_env_steps=0,
                                  **options)
        probe = probe or WindowProbe(warmup, seconds)
        summary = train(config, on_report=probe)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stop_if_signalled(summary)
    path = summary.get("data_path", {})
    fps, window = probe.rate()
    return {"fps": fps, "window_s": round(window, 1), "return": summary["episode_return_mean"],
            "env_steps": summary["env_steps"], "slots_shm": path.get("slots_shm", 0),
            "slots_comms": path.get("slots_comms", 0), "params_comms_reads": path.get("params_comms_reads", 0),
            "train_step_ms": summary.get("train_step_ms"),
            "copy_ms_shm": 1e3 * path.get("copy_s_shm", 0.0) / max(path.get("slots_shm", 0), 1),
            "copy_ms_comms": 1e3 * path.get("copy_s_comms", 0.0) / max(path.get("slots_comms", 0), 1),
            "remote_read_rpcs": path.get("remote_read_rpcs", 0), "remote_reads": path.get("remote_reads", 0)}


# ---- two hosts in network namespaces ----


def netns_down(hosts: int = 8) -> None:
    remove_hosts(PREFIX, [f"{PREFIX}_h{i}" for i in range(1, hosts + 1)])


def netns_up(hosts: int = 2) -> list[str]:
    """``hosts`` namespaces h1..hN with addresses SUBNET.1..N on a bridge in h1; the driver at SUBNET.254."""
    names = [f"{PREFIX}_h{i}" for i in range(1, hosts + 1)]
    netns_down(max(hosts, 8))
    bridge_hosts(PREFIX, names, SUBNET)
    return names


class NetnsCluster:
    """``dask scheduler`` and ``dask worker`` processes in the namespaces of :func:`netns_up` (stopped on exit)."""

    def __init__(self, hosts: int) -> None:
        if shutil.which("ip") is None:
            raise RuntimeError("the `ip` command (iproute2) is not installed")
        dask = os.path.join(os.path.dirname(sys.executable), "dask")
        self.dask = dask if os.path.exists(dask) else (shutil.which("dask") or "dask")
        self.procs: list[subprocess.Popen] = []
        self.logs = tempfile.mkdtemp(prefix="daskrl_scale_logs_")
        self.address = f"tcp://{SUBNET}.1:8786"
        self.names = netns_up(hosts)
        self.start(1, "scheduler", "--host", f"{SUBNET}.1", "--port", "8786", "--dashboard-address",
                   f"{SUBNET}.1:8787")

    def start(self, host: int, *args: str) -> None:
        with open(os.path.join(self.logs, f"{len(self.procs)}.log"), "w") as log:
            self.procs.append(subprocess.Popen(["ip", "netns", "exec", self.names[host - 1], self.dask, *args],
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def worker(self, host: int, name: str, *extra: str) -> None:
        self.start(host, "worker", self.address, "--host", f"{SUBNET}.{host}", "--nworkers", "1", "--nthreads", "1",
                   "--name", name, *extra)

    def wait_for_workers(self, n: int, timeout: float = 120) -> None:
        from distributed import Client

        deadline = time.monotonic() + timeout
        while True:
            try:
                with Client(self.address, timeout=5) as client:
                    client.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
                return
            except OSError:
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                    raise RuntimeError(f"the netns cluster did not start (logs in {self.logs})") from None
                time.sleep(0.5)

    def __enter__(self) -> NetnsCluster:
        return self

    def __exit__(self, *exc) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        netns_down(len(self.names))
        shutil.rmtree(self.logs, ignore_errors=True)


def measure_two_hosts(seconds: float, warmup: float) -> dict:
    with NetnsCluster(2) as cluster:
        cluster.worker(1, "a-learner", "--resources", "learner=1")
        cluster.worker(1, "a-rollout")
        cluster.worker(2, "b-rollout")
        cluster.wait_for_workers(3)
        out = measure(seconds, warmup, scheduler=cluster.address, num_workers=2)
        out["scheduler_polls_per_s"] = scheduler_polls_per_s(cluster.address)
        return {**out, **batcher_per_frame(out)}


def batcher_per_frame(line: dict) -> dict:
    """The batcher's copy time per frame read in place (``shm``) and over comms (``comms``: the remote slots), in
    microseconds: copy seconds / frames read that way (a CartPole slot holds ``slot_frames`` frames), and how many
    remote slots one RPC carried on average (reads started ahead and sent in bulk; 1: one round trip per slot)."""
    from daskrl.config import Config

    c = Config()
    slot_frames = c.sampler.rollout * c.sampler.num_envs_per_worker // c.sampler.num_splits()
    return {"slot_frames": slot_frames,
            "copy_us_per_frame_shm": 1e3 * line["copy_ms_shm"] / slot_frames,
            "copy_us_per_frame_comms": 1e3 * line["copy_ms_comms"] / slot_frames,
            "slots_per_rpc": line["remote_reads"] / line["remote_read_rpcs"] if line["remote_read_rpcs"] else None}


def measure_growing_hosts(hosts: int, period: float, settle: float) -> list[dict]:
    """An elastic run that starts on host 1 (learner and one rollout worker) while hosts 2..N join, one every
    ``period`` seconds (a ``dask worker`` started in the host's namespace): frames/s over each stretch with k
    hosts, from ``settle`` seconds after the k-th host's rollout worker started."""
    import threading

    from daskrl import train
    from daskrl.config import Config

    with NetnsCluster(hosts) as cluster:
        cluster.worker(1, "a-learner", "--resources", "learner=1")
        cluster.worker(1, "a-rollout")
        cluster.wait_for_workers(2)
        points: list[tuple[float, int]] = []

        def add_hosts() -> None:
            while not points:  # the run is training
                time.sleep(0.2)
            for host in range(2, hosts + 1):
                time.sleep(period)
                cluster.worker(host, f"h{host}-rollout")

        threading.Thread(target=add_hosts, daemon=True).start()
        tmp = tempfile.mkdtemp(prefix="daskrl_scale_")
        try:
            config = Config().replace(train_dir=tmp, experiment="grow", dashboard_address="", report_interval=0.5,
                                      scheduler=cluster.address, num_workers=1, elastic=True, train_for_env_steps=0,
                                      train_for_seconds=STARTUP_ALLOWANCE_S + period * hosts + settle)
            summary = train(config, on_report=lambda row: points.append((time.time(), int(row["env_steps"]))))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    stop_if_signalled(summary)
    grew = sorted(e["time"] for e in summary["elastic"] if e["event"] == "grew")
    started = [next(t for t, steps in points if steps > 0)] + grew
    out = []
    for k, begin in enumerate(started, start=1):
        end = started[k] if k < len(started) else points[-1][0]
        window = [(t, s) for t, s in points if begin + settle <= t <= end]
        if len(window) < 2:
            continue
        (t0, s0), (t1, s1) = window[0], window[-1]
        out.append({"hosts": k, "rollout_workers": k, "fps": (s1 - s0) / (t1 - t0), "window_s": round(t1 - t0, 1),
                    "slots_comms": summary["data_path"]["slots_comms"]})
    return out


# ---- the analytic model: frames/s for N real hosts ----

#: messages a second one bus receiver takes (docs/runtime.md, bench_bus.py: 200,649 measured on a 2-core machine)
BUS_MESSAGES_PER_S = 200_000
#: a reader on another host polls the scheduler for a new parameter version this often (ParameterReader)
POLLS_PER_READER_S = 20
#: the learner's host network link assumed for the model (bytes/s): 10 Gb/s
LINK_BYTES_PER_S = 1.25e9


def scheduler_polls_per_s(address: str, n: int = 300) -> float:
    """Variable.get calls a second the scheduler answers one client (the remote readers' parameter poll)."""
    from distributed import Client, Variable

    with Client(address, timeout=10) as client:
        variable = Variable("daskrl-bench-poll", client=client)
        variable.set(1)
        t0 = time.perf_counter()
        for _ in range(n):
            variable.get(timeout=5)
        return n / (time.perf_counter() - t0)


def model_inputs(one: dict, two_hosts: dict | None, polls_per_s: float | None) -> dict:
    """What the model needs, from this run's measurements (see ``predict``)."""
    from daskrl.config import Config
    from daskrl.envs import EnvSpaces, make_env
    from daskrl.models.actor_critic import build_model

    c = Config()
    spaces = EnvSpaces.from_env(make_env(c.env.env))
    model = build_model(spaces, c.model, 0)
    samples_per_step = c.learner.batch_size * c.learner.num_batches_per_epoch
    return {
        "worker_fps": one["fps"],  # one rollout worker, with a core of its own
        "learner_samples_per_s": samples_per_step / (one["train_step_ms"] / 1e3) if one.get("train_step_ms") else None,
        "samples_per_step": samples_per_step,
        "slot_frames": c.sampler.rollout * c.sampler.num_envs_per_worker // c.sampler.num_splits(),
        "copy_ms_shm": one["copy_ms_shm"],
        "copy_ms_comms": two_hosts["copy_ms_comms"] if two_hosts else None,
        "params_bytes": sum(v.numel() * v.element_size() for v in model.state_dict().values()),
        "bus_messages_per_s": BUS_MESSAGES_PER_S,
        "scheduler_polls_per_s": polls_per_s,
    }


def predict(inputs: dict, hosts: int, cores: int, relay: bool = True) -> dict:
    """Frames/s of N hosts with ``cores`` cores each: the learner on host 1 (one core), a rollout worker on every
    other core; the smallest of these limits wins (async APPO samples no faster than the learner trains, since slots
    wait for it), and the one that binds is the bottleneck:

    - sampling: rollout workers x one worker's rate;
    - learner: samples a second its training steps take;
    - batcher: the learner's batcher copies slots one after the other, in place from its own host, over comms from
      the others (remote share = rollout workers off host 1);
    - bus: the learner receives one message per slot and sends one (TrajectoryReady, FreeSlots);
    - parameters: with a relay per host (``relay``, ``--param-relay auto``) every other host pulls each version once
      over the learner's host link; without (``--param-relay off``) every reader off host 1 pulls every version.
    The scheduler's load from parameter polls (none with relays; 20 a second per remote reader without) is reported
    beside it: past its capacity, readers act with older versions (more policy lag) rather than sample less.
    """
    rollout = hosts * cores - 1
    remote = max(0, rollout - (cores - 1))
    limits = {"sampling": rollout * inputs["worker_fps"]}
    if inputs["learner_samples_per_s"]:
        limits["learner"] = inputs["learner_samples_per_s"]
    t_comms = inputs["copy_ms_comms"] if inputs["copy_ms_comms"] is not None else inputs["copy_ms_shm"]
    per_slot_ms = ((rollout - remote) * inputs["copy_ms_shm"] + remote * t_comms) / rollout
    limits["batcher"] = inputs["slot_frames"] / (per_slot_ms / 1e3)
    limits["bus"] = inputs["bus_messages_per_s"] / 2 * inputs["slot_frames"]
    pullers = (hosts - 1) if relay else remote
    if pullers:
        limits["parameters"] = LINK_BYTES_PER_S * inputs["samples_per_step"] / (pullers * inputs["params_bytes"])
    bottleneck = min(limits, key=limits.get)
    polls = 0 if relay else remote * POLLS_PER_READER_S
    return {"hosts": hosts, "cores": cores, "rollout_workers": rollout, "fps": limits[bottleneck],
            "bottleneck": bottleneck, "limits": {k: round(v) for k, v in limits.items()},
            "scheduler_polls_per_s": polls,
            "polls_over_capacity": bool(inputs["scheduler_polls_per_s"]) and polls > inputs["scheduler_polls_per_s"]}


def print_predictions(model: dict) -> None:
    """The model's table: with a relay per host (the default), and beside it the polling design's frames/s and polls."""
    print("| hosts | rollout workers | predicted frames/s | bottleneck | next limit | without relays: frames/s "
          "(bottleneck) | parameter polls/s on the scheduler without relays |")
    print("|---|---|---|---|---|---|---|")
    for p, q in zip(model["predictions"], model["predictions_without_relay"], strict=True):
        following = sorted((v, k) for k, v in p["limits"].items() if k != p["bottleneck"])[0]
        print(f"| {p['hosts']} | {p['rollout_workers']} | {p['fps']:,.0f} | {p['bottleneck']} | "
              f"{following[1]} ({following[0]:,.0f}) | {q['fps']:,.0f} ({q['bottleneck']}) | "
              f"{q['scheduler_polls_per_s']:,}{' (over capacity)' if q['polls_over_capacity'] else ''} |")


def simulate_main(args: argparse.Namespace) -> None:
    """``--simulate``: the control plane measured at each worker count (benchmarks/scale_simulation.py)."""
    from scale_simulation import print_table, simulate

    if any(n < 2 for n in args.simulate):
        raise SystemExit("--simulate: each worker count must be at least 2 (the learner's worker and a rollout worker)")
    result = simulate(args.simulate, args.designs, args.seconds, args.warmup, nanny=args.nanny,
                      scale_batch=args.scale_batch)
    print_table(result)
    if args.json:
        print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per line (after the warm-up)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of each run not measured")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3], help="rollout worker counts")
    parser.add_argument("--no-two-hosts", action="store_true", help="skip the network-namespace line")
    parser.add_argument("--grow-hosts", type=int, default=0,
                        help="also: an elastic run on host 1 that N-1 more netns hosts join, one every --grow-period "
                             "seconds; frames/s per host count (0: skip)")
    parser.add_argument("--grow-period", type=float, default=20.0)
    parser.add_argument("--model-cores", type=int, default=16, help="cores per host in the model's predictions")
    parser.add_argument("--simulate", type=int, nargs="+", default=[], metavar="N",
                        help="instead of the lines above: the control plane with N dask workers on 8 netns hosts, for "
                             "each N (benchmarks/scale_simulation.py; --seconds, --warmup apply)")
    parser.add_argument("--designs", nargs="+", choices=["off", "auto"], default=["off", "auto"],
                        help="--simulate: the param_relay designs to run at each N")
    parser.add_argument("--nanny", action="store_true", help="--simulate: start each dask worker under a nanny")
    parser.add_argument("--scale-batch", action="store_true",
                        help="--simulate: the learner's batch grows with the rollout workers (256 per 7), so the "
                             "samples in flight per version, and the policy lag they make, stay the same at every N")
    parser.add_argument("--links", action="store_true",
                        help="instead of the lines above: training over 1, 2 and 4 netns hosts on shaped links "
                             "(benchmarks/scale_links.py; --seconds, --warmup apply)")
    parser.add_argument("--links-envs", nargs="+", default=["CartPole-v1", "atari/Pong"])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    if args.simulate:
        simulate_main(args)
        return
    if args.links:
        from scale_links import links_main, print_links  # (it imports this module)

        links = links_main(args.seconds, args.warmup, args.links_envs)
        print_links(links)
        if args.json:
            print(json.dumps({"bench": "scale_links", "seconds": args.seconds, "warmup": args.warmup,
                              "lines": links}))
        return

    from daskrl.runtime.workers import worker_server

    worker_server.start()  # as the daskrl command does: workers are forked from a preloaded forkserver
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

    growing: list[dict] = []
    if args.grow_hosts > 1:
        try:
            growing = measure_growing_hosts(args.grow_hosts, args.grow_period, settle=args.warmup)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            skipped += f" growing hosts skipped: {exc}"

    print(f"\nCartPole-v1 training, frames/s (env steps) over {args.seconds:g} s after a {args.warmup:g} s warm-up "
          f"from the first env step; {cores} cores; one learner process besides the rollout workers\n")
    print("| setup | rollout workers | frames/s | mean return at the end | slots via shm / comms |")
    print("|---|---|---|---|---|")
    for line in lines.values():
        print(f"| {line['setup']} | {line['rollout_workers']} | {line['fps']:,.0f} | {line['return']:.1f} | "
              f"{line['slots_shm']:,} / {line['slots_comms']:,} |")
    two = lines.get("two_hosts_2")
    if two is not None:
        per_rpc = f"{two['slots_per_rpc']:.2f}" if two["slots_per_rpc"] is not None else "-"
        print(f"\nThe learner's batcher on two hosts: {two['copy_us_per_frame_comms']:.3f} us per remote frame "
              f"(over comms, {two['slots_comms']:,} slots of {two['slot_frames']:,} frames in "
              f"{two['remote_read_rpcs']:,} RPCs: {per_rpc} slots per RPC), {two['copy_us_per_frame_shm']:.3f} us per "
              f"local frame (shared memory); a slot {two['copy_ms_comms']:.3f} ms over comms, "
              f"{two['copy_ms_shm']:.3f} ms in place")
    if growing:
        print(f"\nOne elastic run, hosts joining every {args.grow_period:g} s (each: one dask worker, one rollout "
              f"worker); frames/s from {args.warmup:g} s after each join to the next\n")
        print("| hosts | rollout workers | frames/s | measured s |")
        print("|---|---|---|---|")
        for line in growing:
            print(f"| {line['hosts']} | {line['rollout_workers']} | {line['fps']:,.0f} | {line['window_s']} |")
    if skipped:
        print(f"\n({skipped.strip()})")
    first = lines.get("embedded_1")
    model: dict = {}
    if first is not None:
        two = lines.get("two_hosts_2")
        inputs = model_inputs(first, two, two.get("scheduler_polls_per_s") if two else None)
        hosts = (1, 2, 4, 8, 16, 32, 64)
        model = {"inputs": inputs, "predictions": [predict(inputs, n, args.model_cores) for n in hosts],
                 "predictions_without_relay": [predict(inputs, n, args.model_cores, relay=False) for n in hosts]}
        rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in inputs.items()}
        print(f"\nModel inputs (measured above): {json.dumps(rounded)}")
        print(f"\nPredicted CartPole-v1 frames/s on N hosts of {args.model_cores} cores (one learner, a rollout "
              "worker on every other core):\n")
        print_predictions(model)
    if args.json:
        print(json.dumps({"cores": cores, "seconds": args.seconds, "warmup": args.warmup, "skipped": skipped,
                          "lines": {k: {**v, "fps": round(v["fps"]),
                                        "return": None if math.isnan(v["return"]) else round(v["return"], 1)}
                                    for k, v in lines.items()},
                          "growing_hosts": [{**g, "fps": round(g["fps"])} for g in growing], "model": model}))


if __name__ == "__main__":
    main()
