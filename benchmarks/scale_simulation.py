"""The control plane of a large cluster, simulated on one machine (issue 36): ``bench_scale.py --simulate 8 32 64``.

For each worker count N: 8 network-namespace "hosts" (bench_scale.py's, with its prefix and subnet), a
``dask scheduler`` on host 1 and N ``dask worker`` processes (``--nworkers 1 --nthreads 1``) spread evenly over the
hosts; the learner on host 1's first worker (``--resources learner=1``), a rollout worker (inline inference) on every
other one, stepping ``daskrl.testing.environments.envs:light``, whose step costs microseconds, so that two cores
carry 64 workers and what is measured is the control plane, not env work. Each design (``param_relay`` ``off``:
every reader off the learner's host polls the scheduler; ``auto``: a relay per host) trains on the same cluster for
``warmup`` seconds from the first env step, then ``seconds`` are measured between two readings:

- the scheduler's CPU share: user + system CPU time of its process (psutil) over the window / the window's seconds;
- messages a second the scheduler dispatched, by op (``daskrl.testing.scheduler_load`` counts every request and
  every batched-stream message), and of those the parameter polls (``variable_get``);
- the policy lag of the samples trained on in the window (median, 95th percentile: the learner's lag counts);
- the learner's slot copy time per frame (in place and over comms), and frames/s (env steps).

On one machine the hosts share its cores: numbers compare designs and worker counts, they do not predict real hosts.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(__file__))
from common import stop_if_signalled  # noqa: E402

HOSTS = 8
LIGHT_ENV = "daskrl.testing.environments.envs:light"
#: each worker process as light as a rollout worker can be: few envs, short slots, a small MLP run in numpy
LIGHT_OPTIONS: dict[str, Any] = {
    "env": LIGHT_ENV, "num_envs_per_worker": 4, "worker_num_splits": 1, "rollout": 16, "slots_per_split": 2,
    "inference": "inline", "numpy_inference": True, "hidden_sizes": [32, 32], "batch_size": 256,
    "num_batches_per_epoch": 4, "elastic": False, "checkpoint_interval": 3600.0, "report_interval": 1.0,
    "dashboard_address": "", "train_for_env_steps": 0,
}
#: a run that never reaches its measured window ends after this many seconds besides warm-up and window
STARTUP_ALLOWANCE_S = 600.0
DESIGNS = ("off", "auto")
#: rollout workers per host-1-sized group whose samples in flight one 256-sample minibatch matches (the 8-worker run)
BASE_ROLLOUT_WORKERS = 7


def options_for(workers: int, scale_batch: bool) -> dict[str, Any]:
    """The run's options. With ``scale_batch`` the learner's minibatch grows with the rollout workers (256 per 7), so
    the samples in flight per version stay the same at every N: async APPO's policy lag is about the samples in
    flight (rollout workers x slot frames) over the samples a version trains on, and with a fixed batch it grows
    with N whatever the parameter path does; the scaled batch leaves the lag that the parameter path and the
    control plane add."""
    options = dict(LIGHT_OPTIONS)
    if scale_batch:
        options["batch_size"] = LIGHT_OPTIONS["batch_size"] * max(1, round((workers - 1) / BASE_ROLLOUT_WORKERS))
    return options


def relay_available() -> bool:
    """Whether this daskrl has the ``param_relay`` option (the relay design, issue 36 part 1)."""
    from daskrl.config.options import SECTIONS

    return any(f.name == "param_relay" for c in SECTIONS.values() for f in dataclasses.fields(c))


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (all its threads)."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def used_memory_mb() -> float:
    """The machine's memory in use (total less available, as ``free -m``'s 'used' plus reclaimable caches)."""
    memory = psutil.virtual_memory()
    return (memory.total - memory.available) / 2**20


class MemoryPeak:
    """The most memory in use while it runs (sampled twice a second on a thread of its own)."""

    def __init__(self) -> None:
        self.before = self.peak = used_memory_mb()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="memory-peak")
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            self.peak = max(self.peak, used_memory_mb())

    def stop(self) -> dict[str, float]:
        self._done.set()
        self._thread.join()
        return {"used_before_mb": round(self.before), "used_peak_mb": round(self.peak)}


class SchedulerProbe:
    """A client of our own on the scheduler: installs its op counts, then reads them with its CPU time."""

    def __init__(self, address: str) -> None:
        from distributed import Client

        from daskrl.testing.scheduler_load import install_op_counts

        self.client = Client(address, timeout=30, set_as_default=False)  # train() makes its own
        self.pid = int(self.client.run_on_scheduler(install_op_counts)["pid"])

    def reading(self) -> dict[str, Any]:
        from daskrl.testing.scheduler_load import read_op_counts

        counts = self.client.run_on_scheduler(read_op_counts)
        return {"t": time.monotonic(), "cpu_s": cpu_seconds(self.pid), "counts": counts}

    def close(self) -> None:
        self.client.close()


def window_numbers(start: dict[str, Any], end: dict[str, Any], slot_frames: int) -> dict[str, Any]:
    """What one design did between two readings (each: ``t``, ``env_steps``, ``scheduler`` and ``learner`` as
    :class:`Window` takes them): the numbers of the module docstring, per second of the window."""
    from daskrl.algo.appo.trainer import lag_percentile

    dt = end["t"] - start["t"]
    s0, s1 = start["scheduler"], end["scheduler"]
    ops = {op: n - s0["counts"].get(op, 0) for op, n in s1["counts"].items()}
    ops = {op: n for op, n in ops.items() if n > 0}
    lags = np.asarray(end["learner"]["policy_lag_counts"], np.int64)
    before = np.asarray(start["learner"]["policy_lag_counts"], np.int64)
    lags[:len(before)] -= before[:len(lags)]
    b0, b1 = start["learner"]["batcher"], end["learner"]["batcher"]
    slots = {way: b1[f"slots_{way}"] - b0[f"slots_{way}"] for way in ("shm", "comms")}
    copy_s = {way: b1[f"copy_s_{way}"] - b0[f"copy_s_{way}"] for way in ("shm", "comms")}
    per_frame = {way: 1e6 * copy_s[way] / (slots[way] * slot_frames) if slots[way] else None for way in slots}
    total_slots = sum(slots.values())
    return {
        "window_s": round(dt, 2),
        "fps": (end["env_steps"] - start["env_steps"]) / dt,
        "scheduler_cpu_share": (s1["cpu_s"] - s0["cpu_s"]) / dt,
        "scheduler_messages_per_s": sum(ops.values()) / dt,
        "parameter_polls_per_s": ops.get("variable_get", 0) / dt,
        "scheduler_ops_per_s": {op: round(n / dt, 1) for op, n in sorted(ops.items(), key=lambda kv: -kv[1])},
        "policy_lag_p50": _or_none(lag_percentile(lags, 50)), "policy_lag_p95": _or_none(lag_percentile(lags, 95)),
        "samples_trained": int(lags.sum()),
        "copy_us_per_frame": 1e6 * sum(copy_s.values()) / (total_slots * slot_frames) if total_slots else None,
        "copy_us_per_frame_shm": per_frame["shm"], "copy_us_per_frame_comms": per_frame["comms"],
        "slots_shm": slots["shm"], "slots_comms": slots["comms"],
    }


def _or_none(value: float) -> float | None:
    """NaN (nothing counted) as None: JSON has no NaN."""
    return None if np.isnan(value) else value


def _learner_reading(learner: dict[str, Any]) -> dict[str, Any]:
    batcher = learner.get("batcher", {})
    return {"policy_lag_counts": list(learner.get("policy_lag_counts", [])),
            "batcher": {k: batcher.get(k, 0) for k in ("slots_shm", "slots_comms", "copy_s_shm", "copy_s_comms")}}


def _window_observer(probe: SchedulerProbe, warmup: float, seconds: float) -> Any:
    """An observer that takes the readings of :func:`window_numbers` ``warmup`` s after the first env step and
    ``seconds`` later, then stops the run."""
    from daskrl import Observer

    class Window(Observer):
        def __init__(self) -> None:
            self.first_step: float | None = None
            self.readings: list[dict[str, Any]] = []

        def on_poll(self, run: Any) -> None:
            now = time.monotonic()
            if self.first_step is None:
                if run.state.env_steps > 0:
                    self.first_step = now
                return
            due = self.first_step + warmup if not self.readings else self.readings[0]["t"] + seconds
            if len(self.readings) < 2 and now >= due:
                self.readings.append({"t": now, "env_steps": run.state.env_steps, "scheduler": probe.reading(),
                                      "learner": _learner_reading(run.state.learner)})
                if len(self.readings) == 2:
                    run.request_stop("the measured window is over")

    return Window()


def run_design(address: str, workers: int, design: str, seconds: float, warmup: float,
               scale_batch: bool = False) -> dict[str, Any]:
    """One training run on the simulated cluster at ``address`` (``workers`` dask workers, the learner's included),
    measured as the module docstring says."""
    from daskrl import train
    from daskrl.config import Config

    relay = {"param_relay": design} if relay_available() else {}
    tmp = tempfile.mkdtemp(prefix="daskrl_scalesim_")
    probe = SchedulerProbe(address)
    try:
        window = _window_observer(probe, warmup, seconds)
        config = Config().replace(train_dir=tmp, experiment=f"sim_{workers}_{design}", scheduler=address,
                                  num_workers=workers - 1, train_for_seconds=STARTUP_ALLOWANCE_S + warmup + seconds,
                                  **options_for(workers, scale_batch), **relay)
        t0 = time.monotonic()
        summary = train(config, observers=[window])
    finally:
        probe.close()
        shutil.rmtree(tmp, ignore_errors=True)
    stop_if_signalled(summary)
    slot_frames = config.sampler.rollout * config.sampler.num_envs_per_worker // config.sampler.num_splits()
    out: dict[str, Any] = {"design": design, "workers": workers, "rollout_workers": workers - 1,
                           "first_step_after_s": round(window.first_step - t0, 1) if window.first_step else None,
                           "stop_reason": summary.get("stop_reason"), "slot_frames": slot_frames,
                           "batch_size": config.learner.batch_size}
    if len(window.readings) < 2:
        out["error"] = f"no measured window (the run stopped: {summary.get('stop_reason')})"
        return out
    return {**out, **window_numbers(*window.readings, slot_frames)}


def _run_or_say_why(address: str, workers: int, design: str, seconds: float, warmup: float,
                    scale_batch: bool = False) -> dict[str, Any]:
    """:func:`run_design`, or the one line that says why it failed (the other design still runs)."""
    try:
        return run_design(address, workers, design, seconds, warmup, scale_batch)
    except Exception as exc:
        return {"design": design, "workers": workers, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def namespaces_in_use() -> list[str]:
    """bench_scale.py's namespaces that processes still run in (a live run of it: not leftovers to delete)."""
    from bench_scale import PREFIX

    if shutil.which("ip") is None:
        raise RuntimeError("the `ip` command (iproute2) is not installed")
    busy = []
    for i in range(1, HOSTS + 1):
        out = subprocess.run(["ip", "netns", "pids", f"{PREFIX}_h{i}"], capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            busy.append(f"{PREFIX}_h{i}")
    return busy


class SimulatedCluster:
    """bench_scale.py's namespace cluster of :data:`HOSTS` hosts with ``workers`` dask workers spread evenly over
    them (worker i on host i mod 8 + 1; worker 0, on host 1, offers the learner resource), and a watchdog process
    (netns_watchdog.py) that removes it all should this process die before its own cleanup (its exit)."""

    def __init__(self, workers: int, nanny: bool) -> None:
        from bench_scale import PREFIX, NetnsCluster

        busy = namespaces_in_use()
        if busy:
            raise RuntimeError(f"processes still run in {', '.join(busy)}: another bench_scale.py run holds these "
                               "namespaces (wait for it, or end it)")
        watchdog = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns_watchdog.py")
        self.watchdog = subprocess.Popen([sys.executable, watchdog, str(os.getpid()), PREFIX, str(HOSTS)],
                                         start_new_session=True)
        self.cluster: Any = None
        try:
            self.cluster = NetnsCluster(HOSTS)
            self.address = self.cluster.address
            extra = [] if nanny else ["--no-nanny"]
            for i in range(workers):
                host = i % HOSTS + 1
                role = ["--resources", "learner=1"] if i == 0 else []
                self.cluster.worker(host, f"h{host}-w{i}", *extra, *role)
            self.cluster.wait_for_workers(workers, timeout=STARTUP_ALLOWANCE_S)
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self) -> SimulatedCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.cluster is not None:
                self.cluster.__exit__(None, None, None)
            else:  # the namespaces may be up without their scheduler
                from bench_scale import netns_down

                netns_down(HOSTS)
        finally:
            self.watchdog.terminate()
            self.watchdog.wait(10)


def simulate(worker_counts: list[int], designs: list[str], seconds: float, warmup: float,
             nanny: bool = False, scale_batch: bool = False) -> dict[str, Any]:
    """Every design at every worker count (both designs on one cluster per count, ``off`` first); a design this
    daskrl lacks is reported as unavailable. Namespaces, processes and dead owners' shared memory are removed after
    each count, also on Ctrl-C or an error."""
    out: dict[str, Any] = {"hosts": HOSTS, "seconds": seconds, "warmup": warmup, "options": LIGHT_OPTIONS,
                           "nanny": nanny, "scale_batch": scale_batch, "unavailable": {}, "runs": []}
    if "auto" in designs and not relay_available():
        out["unavailable"]["auto"] = ("this daskrl has no param_relay option (the relay is being built on branch "
                                      "'relay'): only today's design, every reader polling the scheduler, was run")
    runnable = [d for d in designs if d not in out["unavailable"]]
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # cleanup runs on SIGTERM as on Ctrl-C
    try:
        for workers in worker_counts:
            out["runs"].extend(_simulate_count(workers, runnable, seconds, warmup, nanny, scale_batch))
    finally:
        signal.signal(signal.SIGTERM, previous)
    return out


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _simulate_count(workers: int, runnable: list[str], seconds: float, warmup: float, nanny: bool,
                    scale_batch: bool = False) -> list[dict[str, Any]]:
    """:func:`simulate` at one worker count."""
    from daskrl.runtime.cleanup.segments import sweep

    memory = MemoryPeak()
    t0 = time.monotonic()
    started: float | None = None
    try:
        with SimulatedCluster(workers, nanny) as cluster:
            started = time.monotonic() - t0
            runs = [_run_or_say_why(cluster.address, workers, d, seconds, warmup, scale_batch) for d in runnable]
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        runs = [{"design": d, "workers": workers, "error": f"{type(exc).__name__}: {exc}"} for d in runnable]
    finally:
        sweep(dead_only=True)  # segments whose owners died (a worker killed at teardown)
        peak = memory.stop()
    for run in runs:
        run.update(cluster_start_s=None if started is None else round(started, 1), **peak)
    return runs


def _number(value: Any, fmt: str) -> str:
    return "-" if value is None or (isinstance(value, float) and np.isnan(value)) else format(value, fmt)


def print_table(result: dict[str, Any]) -> None:
    """The measured numbers, one row per worker count and design (errors and unavailable designs below)."""
    print(f"\nSimulated cluster: {result['hosts']} netns hosts on this machine's cores, "
          f"daskrl.testing.environments.envs:light, {result['seconds']:g} s measured after {result['warmup']:g} s "
          "from the first env step\n")
    print("| dask workers | param_relay | minibatch | frames/s | scheduler CPU | scheduler msgs/s | parameter polls/s | "
          "policy lag p50 / p95 | slot copy µs/frame (shm / comms) | cluster start s | peak memory MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in result["runs"]:
        if "error" in r:
            continue
        print(f"| {r['workers']} | {r['design']} | {r.get('batch_size', '-')} | {r['fps']:,.0f} | "
              f"{100 * r['scheduler_cpu_share']:.0f}% | "
              f"{r['scheduler_messages_per_s']:,.0f} | {r['parameter_polls_per_s']:,.0f} | "
              f"{_number(r['policy_lag_p50'], 'g')} / {_number(r['policy_lag_p95'], 'g')} | "
              f"{_number(r['copy_us_per_frame_shm'], '.2f')} / {_number(r['copy_us_per_frame_comms'], '.2f')} | "
              f"{_number(r['cluster_start_s'], 'g')} | {r['used_peak_mb']:,} |")
    for r in result["runs"]:
        if "error" in r:
            print(f"({r['workers']} workers, param_relay={r['design']}: {r['error']})")
    for design, why in result["unavailable"].items():
        print(f"(param_relay={design} unavailable: {why})")
