"""What the test modules share, in one place (fixtures live in ``conftest.py``; headless Chromium in ``browser.py``):
a run's configuration, the ``slow`` marker, waiting, processes and clusters started from the command line, faults
injected from outside (a SIGKILLed component), the dashboard's JSON endpoints, the chains of sampled slots and what
every batched env backend must do at a time limit.

No test module imports another test module: a helper two of them need lives here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from distributed import default_client

from daskrl.config import Config
from daskrl.runtime import dask_internals
from daskrl.runtime.access.runs import list_runs
from daskrl.testing.hosts.netns import DRIVER_OCTET, bridge_hosts, ip, netns_unavailable, remove_hosts

# ---- a run's configuration ----


def run_config(tmp_path: Path, experiment: str | None = None, *, base: Mapping[str, Any] | None = None,
               **options: Any) -> Config:
    """A run under ``tmp_path`` with no dashboard of its own: ``base`` (a test module's usual options), then
    ``options`` over it. The dashboard is off because tests on one machine would fight over its port."""
    values: dict[str, Any] = {"train_dir": str(tmp_path), "dashboard_address": ""}
    if experiment is not None:
        values["experiment"] = experiment
    return Config.from_flat({**values, **(base or {}), **options})


#: a row twice a second: for tests that act on a run's rows (a fault drill, a callback) or count them
REPORT_OFTEN: dict[str, Any] = {"report_interval": 0.5}
#: a small CartPole run: one rollout worker, short rollouts and batches, a report every half second
SMALL_CARTPOLE: dict[str, Any] = {"env": "CartPole-v1", "num_workers": 1, "num_envs_per_worker": 8, "rollout": 16,
                                  "batch_size": 128, "num_batches_per_epoch": 2, "report_interval": 0.5}


#: DQN on CartPole, small and quick: one rollout worker, a 64x64 ReLU Q-network, a 25-update target refresh
DQN_CARTPOLE = {"env": "CartPole-v1", "algo": "dqn", "num_workers": 1, "num_envs_per_worker": 8, "rollout": 16,
                "batch_size": 64, "learning_rate": 2e-3, "hidden_sizes": [64, 64], "activation": "relu",
                "target_update_interval": 25, "replay_ratio": 0.25, "exploration_fraction": 0.2,
                "exploration_eps": 0.02, "learning_starts": 500, "max_grad_norm": 10.0}


# ---- the slow marker ----


def slow(reason: str) -> pytest.MarkDecorator:
    """Marks a test that takes seconds (``pytest -m "not slow"`` leaves it out, the default run keeps it); ``reason``
    says what makes it long, so the next engineer knows before running it."""
    return pytest.mark.slow(reason=reason)


# ---- waiting and worker processes ----


def wait_for(fn: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``fn`` until it returns something true (and return that), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not met within {timeout} s")


def set_worker_env(client, name: str, value: str | None) -> None:
    """Set or clear an environment variable in every worker process."""

    def apply(name=name, value=value):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    client.run(apply)


def run_watching_children(cmd: list[str]) -> tuple[int, str, set[int]]:
    """Run ``cmd`` to its end, watching its process tree: (exit status, stderr, pids of every descendant seen)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started: set[int] = set()
    while proc.poll() is None:
        try:
            started |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.Error:  # exiting
            pass
        time.sleep(0.005)
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    return proc.returncode, err, started


def worker_pids(client) -> set[int]:
    """The pid of every worker process of ``client``'s cluster."""
    return set(client.run(os.getpid).values())


# ---- clusters started from the command line (``dask scheduler``, ``dask worker``) ----


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def dask_command() -> str:
    """The ``dask`` command of this environment (its workers must import daskrl, as ours do)."""
    path = os.path.join(os.path.dirname(sys.executable), "dask")
    return path if os.path.exists(path) else (shutil.which("dask") or "dask")


class Processes:
    """Processes started for a test, each in its own session (so its whole tree can be signalled by its id)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.seen: dict[int, float] = {}  # pid -> start time of every process of their trees: all must end

    def start(self, name: str, *args: str, env: dict | None = None) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "w")
        proc = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})}, cwd=self.log_dir)
        log.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text()[-3000:]

    def _remember_trees(self) -> None:
        for proc in self.procs.values():
            try:
                root = psutil.Process(proc.pid)
                for p in [root, *root.children(recursive=True)]:
                    self.seen[p.pid] = p.create_time()
            except psutil.NoSuchProcess:
                pass

    def _still_ours(self) -> list[psutil.Process]:
        """Remembered processes still running (same pid *and* start time: never a recycled pid)."""
        out = []
        for pid, started in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    @staticmethod
    def _terminate(procs: list[subprocess.Popen]) -> None:
        """SIGTERM each process's session together; SIGKILL what has not exited 15 s later."""
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # its own session: the process and its children
        deadline = time.monotonic() + 15
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def stop(self) -> list[int]:
        """Terminate everything, the scheduler last; kill what does not exit; returns pids still alive (none).

        The scheduler ends once the rest has: with all of them signalled at once, a ``dask worker`` that the
        scheduler's close reached while its nanny was closing did not exit until the nanny killed it 8 s later
        (distributed 2026.8, its log: "Stopping worker ... Reason: scheduler-close", then "Worker process still alive
        after 8.0 seconds, killing"): 8 s of many such teardowns."""
        self._remember_trees()
        last = [proc for name, proc in self.procs.items() if name == "scheduler"]
        first = [proc for proc in reversed(list(self.procs.values())) if proc not in last]
        for group in (first, last):
            self._terminate(group)
        left = self._still_ours()
        for p in left:  # a child that outlived its parent: by its own id
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(left, timeout=10)
        return sorted(p.pid for p in self._still_ours())


def wait_for_cluster(address: str, n_workers: int, procs: Processes, security=None, timeout: float = 120.0):
    """A client of the cluster once ``n_workers`` workers are up (fails early, with logs, if a process died)."""
    from distributed import Client

    deadline = time.monotonic() + timeout
    client = None
    while client is None:
        try:
            client = Client(address, security=security, timeout=5)
        except OSError:
            dead = {n: p.returncode for n, p in procs.procs.items() if p.poll() is not None}
            assert not dead and time.monotonic() < deadline, \
                f"the cluster did not start (exited: {dead}): {procs.log(next(iter(procs.procs)))}"
            time.sleep(0.5)
    while len(dask_internals.cluster_workers(client)) < n_workers:
        dead = {n: procs.log(n) for n, p in procs.procs.items() if p.poll() is not None}
        if dead or time.monotonic() > deadline:
            client.close()
            raise AssertionError(f"{len(dask_internals.cluster_workers(client))}/{n_workers} workers; exited: {dead}")
        time.sleep(0.3)
    return client


def scheduler_address(scheduler_file: Path, procs: Processes, timeout: float = 60.0) -> str:
    """The address a ``dask scheduler --scheduler-file`` wrote, once it did (fails, with its log, if it exited)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return json.loads(scheduler_file.read_text())["address"]
        except (FileNotFoundError, ValueError, KeyError):
            exited = procs.procs["scheduler"].poll()
            assert exited is None and time.monotonic() < deadline, \
                f"the scheduler did not start (exited: {exited}): {procs.log('scheduler')}"
            time.sleep(0.2)


@contextlib.contextmanager
def start_cli_cluster(log_dir: Path, n_workers: int, worker_args: Callable[[int], list[str]] = lambda i: []):
    """``dask scheduler`` and ``n_workers`` ``dask worker`` processes (one thread each, named w0, w1, ...; ``worker_args``
    gives worker ``i`` more flags) started from the command line on loopback; yields ``{"address", "client",
    "procs"}``, then stops every process and checks none is left."""
    procs = Processes(log_dir)
    scheduler_file = Path(log_dir) / "scheduler.json"
    client = None
    try:
        # port 0: the scheduler binds a free port itself and writes its address to the file (a port picked here
        # and bound there later was once taken in between: "Address already in use")
        procs.start("scheduler", dask_command(), "scheduler", "--host", "127.0.0.1", "--port", "0",
                    "--scheduler-file", str(scheduler_file), "--dashboard-address", "127.0.0.1:0")
        address = scheduler_address(scheduler_file, procs)
        for i in range(n_workers):
            procs.start(f"w{i}", dask_command(), "worker", address, "--nworkers", "1", "--nthreads", "1",
                        "--name", f"w{i}", *worker_args(i))
        client = wait_for_cluster(address, n_workers, procs)
        yield {"address": address, "client": client, "procs": procs}
    finally:
        if client is not None:
            client.close()
        left = procs.stop()
        assert left == [], f"processes left running: {left}"


def scopes_by_worker(client) -> dict[str, set[str]]:
    """The runs (component scopes) whose components each worker hosts."""
    listed = client.sync(client.scheduler.daskrl_components)["components"]
    out: dict[str, set[str]] = {}
    for name, info in listed.items():
        out.setdefault(info["address"], set()).add(name.rpartition("/")[0])
    return out


def training(client, *names: str) -> dict[str, dict] | None:
    """The registry's runs once every one of ``names`` trains (None before)."""
    runs = {r["name"]: r for r in list_runs(client)["runs"]}
    return runs if all(runs.get(n, {}).get("state") == "running" for n in names) else None


# ---- two hosts: network namespaces joined by a bridge ----


class TwoHosts:
    """Namespaces ``<prefix>_h1`` (``<subnet>.1``, with the bridge) and ``<prefix>_h2`` (``<subnet>.2``); the driver
    keeps a veth end with ``<subnet>.254`` in its own namespace. Only the private range 10.77.0.0/16, only these
    links. The names and the subnet are this test process's own (its pid): two test runs on one machine would
    otherwise delete each other's hosts (``up`` clears leftovers first) or share one subnet."""

    def __init__(self, owner: int | None = None) -> None:
        owner = os.getpid() if owner is None else owner
        self.prefix = f"drl{owner}"  # an interface name holds 15 characters: drl<pid>_br fits
        subnet = f"10.77.{owner % 250}"
        self.ns = (f"{self.prefix}_h1", f"{self.prefix}_h2")
        self.subnet = subnet
        self.hosts = (f"{subnet}.1", f"{subnet}.2")
        self.driver = f"{subnet}.{DRIVER_OCTET}"

    def up(self) -> None:
        self.down()  # leftovers of an interrupted run of this pid
        remove_abandoned_hosts()  # and of runs whose test process is gone (one may hold this subnet)
        bridge_hosts(self.prefix, list(self.ns), self.subnet)

    def down(self) -> None:
        remove_hosts(self.prefix, list(self.ns))

    def exists(self) -> bool:
        listed = ip("netns", "list", check=False).stdout
        return any(line.split()[0] in self.ns for line in listed.splitlines() if line.strip())


def remove_abandoned_hosts() -> None:
    """Delete the namespaces (and the driver's veth end) of every :class:`TwoHosts` whose test process is gone."""
    listed = ip("netns", "list", check=False).stdout
    owners = {int(m.group(1)) for line in listed.splitlines() if (m := re.match(r"drl(\d+)_h[12]\b", line.strip()))}
    for owner in owners:
        if not psutil.pid_exists(owner):
            TwoHosts(owner).down()


@contextlib.contextmanager
def start_two_hosts(log_dir: Path, workers: list[tuple[int, str, list[str]]], env: dict | None = None):
    """A scheduler on host 1 (see :class:`TwoHosts`) and ``dask worker`` processes (one thread each, under a nanny
    that restarts a killed one, with ``env`` in their environment): ``(host index, name, more flags)`` each; yields
    ``{"address", "client", "net", "procs"}``, then stops every process, deletes the namespaces and checks nothing is
    left. Skips where network namespaces cannot be made."""
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    net = TwoHosts()
    procs = Processes(log_dir)
    client = None
    try:
        net.up()
        port = 8786
        address = f"tcp://{net.hosts[0]}:{port}"
        dask = dask_command()
        procs.start("scheduler", "ip", "netns", "exec", net.ns[0], dask, "scheduler", "--host", net.hosts[0],
                    "--port", str(port), "--dashboard-address", f"{net.hosts[0]}:8787")
        for host, name, args in workers:
            procs.start(name, "ip", "netns", "exec", net.ns[host], dask, "worker", address, "--host", net.hosts[host],
                        "--nworkers", "1", "--nthreads", "1", "--name", name, *args, env=env)
        client = wait_for_cluster(address, len(workers), procs)
        yield {"address": address, "client": client, "net": net, "procs": procs}
    finally:
        if client is not None:
            client.close()
        left = procs.stop()
        net.down()
        assert left == [], f"processes left running: {left}"
        assert not net.exists(), "network namespaces left behind"


def worker_names(client) -> dict[str, str]:
    """Each worker's address -> its name (``--name``)."""
    return {a: str(w["name"]) for a, w in dask_internals.cluster_workers(client).items()}


# ---- faults injected from outside: a SIGKILLed component ----


def components_of(client) -> dict[str, dict]:
    """The bus registry of a cluster: each component's own name -> {"address", "pid", "cls", ...} (its name on the
    bus, ``<run id>/<name>``, scopes it by run: one run per test here)."""
    listed = client.sync(client.scheduler.daskrl_components)["components"]
    return {name.rpartition("/")[2]: info for name, info in listed.items()}


def registry() -> dict[str, dict]:
    """:func:`components_of` the running training's cluster (``train()`` opens it, whose client is the default one
    of this process)."""
    return components_of(default_client())


def worker_pid(name: str) -> int:
    """The pid of the Dask worker process that hosts component ``name`` (checked against the worker itself)."""
    info = registry()[name]
    pid = default_client().run(os.getpid, workers=[info["address"]])[info["address"]]
    assert pid == info["pid"], (pid, info)
    return pid


class Killer:
    """``on_report`` callback that SIGKILLs the worker process hosting ``component`` once ``ready(row)`` is
    true. The kill runs on a background thread (it asks the scheduler and the worker for the pid); ``wait``
    (optional, on that thread) returns when the moment has come."""

    def __init__(self, component: str, ready: Callable[[dict], bool], wait: Callable[[], None] | None = None) -> None:
        self.component, self.ready, self.wait = component, ready, wait
        self.rows: list[dict] = []
        self.thread: threading.Thread | None = None
        self.pid: int | None = None
        self.killed_at: float | None = None
        self.rows_before_kill = 0
        self.error: BaseException | None = None

    def __call__(self, row: dict) -> None:
        self.rows.append(row)
        if self.thread is None and self.ready(row):
            self.thread = threading.Thread(target=self._kill, name="test-killer", daemon=True)
            self.thread.start()

    def _kill(self) -> None:
        try:
            pid = worker_pid(self.component)
            if self.wait is not None:
                self.wait()
            self.rows_before_kill = len(self.rows)
            os.kill(pid, signal.SIGKILL)
            self.pid, self.killed_at = pid, time.monotonic()
        except BaseException as exc:  # reported by check()
            self.error = exc

    def check(self) -> None:
        assert self.thread is not None, f"the run never got ready for the kill: {self.rows[-3:]}"
        self.thread.join(30)
        assert self.error is None, f"the kill failed: {self.error!r}"
        assert self.killed_at is not None


def recovery_of(summary: dict, component: str) -> dict:
    """The one recovery of ``component`` in a run's summary (printed, with how long it took)."""
    records = [r for r in summary["recoveries"] if r["component"] == component]
    assert len(records) == 1, summary["recoveries"]
    record = records[0]
    assert record["recovery_s"] > 0
    print(f"\nrecovery of {component} ({record['role']}) after SIGKILL: {record['recovery_s']:.2f} s "
          f"(cause: {record['cause']})")
    return record


# ---- the dashboard's JSON endpoints ----


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


# ---- sampled slots ----


def split_chains(slots: list[dict], num_splits: int,
                 continues: Callable[[dict, dict], bool] | None = None) -> list[list[dict]]:
    """Group one worker's slots (arrival order) into per-split chains: a slot continues the chain whose last
    observation (obs[T]) is its first one. A new chain may only start from freshly reset Counting envs.

    Two splits can end in the same Counting state (same step, episode and last actions); either chain is then
    the same for the env bookkeeping, and the slot goes to the one whose newest policy version fits best (the
    newest not above the slot's first version), so a valid assignment is never missed. ``continues(last, slot)``:
    a further condition for ``slot`` to follow a chain's ``last`` slot (a recurrent policy's carried state tells
    two such splits apart)."""
    chains: list[list[dict]] = []
    for i, s in enumerate(slots):
        first = s["obs"][0]
        matches = [c for c in chains if np.array_equal(c[-1]["obs"][-1], first)
                   and (continues is None or continues(c[-1], s))]
        if matches:
            v = s["policy_version"][0]
            fits = [c for c in matches if c[-1]["policy_version"][-1] <= v] or matches
            max(fits, key=lambda c: c[-1]["policy_version"][-1]).append(s)
            continue
        fresh = np.all(first[:, 0] == 0) and np.all(first[:, 1] == -1)
        assert fresh and len(chains) < num_splits, (
            f"slot #{i} starts with {first.tolist()}, which is neither the last observation of an earlier slot "
            f"of its split ({[c[-1]['obs'][-1].tolist() for c in chains]}) nor a fresh reset")
        chains.append([s])
    assert len(chains) == num_splits, f"expected {num_splits} splits' chains of slots, got {len(chains)}"
    return chains


# ---- batched env backends ----


def assert_pendulum_cut_keeps_its_final_observation(group: Any, time_limit: int) -> None:
    """A batched backend's group of 3 Pendulums, pushed at full torque: the step that reaches ``time_limit`` cuts every
    episode (truncated, not terminated), keeps each one's final observation, one step on from the one before (and
    on the unit circle), while the slot already holds the next episode's start; the records say so."""
    obs, reward = np.zeros((3, 3), np.float32), np.zeros(3, np.float32)
    terminated, truncated = np.zeros(3, bool), np.zeros(3, bool)
    push = np.full((3, 1), 9.0, np.float32)  # clipped to 2
    group.reset(obs)
    for _ in range(time_limit - 1):
        group.step(push, obs, reward, terminated, truncated)
    before_end = obs.copy()
    assert not (terminated | truncated).any()
    group.step(push, obs, reward, terminated, truncated)
    assert truncated.all() and not terminated.any()
    finals = dict(group.pop_truncations())
    assert sorted(finals) == [0, 1, 2]
    for i, final in finals.items():
        assert not np.array_equal(final, obs[i])
        assert abs(final[2] - before_end[i][2]) <= (15.0 + 3 * 2.0) * 0.05 + 1e-5  # (3g/2l + 3u/ml^2) dt
        assert np.isclose(np.hypot(final[0], final[1]), 1.0, rtol=1e-5)
    stats = group.pop_episode_stats()
    assert [(length, column) for _, length, column in stats] == [(time_limit, 0), (time_limit, 1), (time_limit, 2)]
    assert all(ret < 0 for ret, _, _ in stats)  # Pendulum's costs


def slot_arrays(n: int, shape: tuple, dtype: str = "float32") -> tuple[np.ndarray, ...]:
    """One step's arrays of ``n`` envs, as a slot lends them to a group: observations, rewards, terminated, truncated."""
    return np.zeros((n, *shape), dtype), np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)


def assert_cartpole_steps_as_gymnasiums(group: Any, n: int, atol: float, first_state_bound: float | None = None
                                        ) -> tuple[int, int]:
    """A batched backend's group of ``n`` CartPoles, stepped 300 times with random actions: from every state it
    reaches, gymnasium's CartPole given that state and the same action lands on the group's next state (within
    ``atol``) and ends alike, paying 1 a step. A batched backend draws its first states from its own generator, so the
    two cannot start alike. With ``first_state_bound``, every first observation (the reset's, and those an ended
    env's column holds at once) lies within it. Returns (episodes ended, steps compared); the group's records hold
    exactly the episodes that ended, each with its return equal to its length."""
    import gymnasium as gym

    reference = gym.make("CartPole-v1").unwrapped
    reference.reset(seed=0)
    obs, reward, terminated, truncated = slot_arrays(n, (4,))
    group.reset(obs)
    if first_state_bound is not None:
        assert np.abs(obs).max() <= first_state_bound
    rng, ends, compared = np.random.default_rng(0), 0, 0
    for _ in range(300):
        before, actions = obs.copy(), rng.integers(0, 2, n)
        group.step(actions, obs, reward, terminated, truncated)
        for i in range(n):
            reference.state, reference.steps_beyond_terminated = before[i].astype(np.float64), None
            expected, r, ended, _, _ = reference.step(int(actions[i]))
            assert terminated[i] == ended and r == reward[i] == 1.0
            if not ended:
                np.testing.assert_allclose(obs[i], expected, rtol=0, atol=atol)
                compared += 1
            elif first_state_bound is not None:  # the column already holds the next episode's first observation
                assert np.abs(obs[i]).max() <= first_state_bound
        ends += int(terminated.sum())
    stats = group.pop_episode_stats()
    assert len(stats) == ends and all(ret == length for ret, length, _ in stats)
    return ends, compared
