"""Envs that own processes (a VizDoom engine per game, with ``/dev/shm`` entries): nothing of them outlives the
process that built them, however it ends (daskrl/envs/owned_processes.py, daskrl/runtime/cleanup/process_watcher.py).

The env is :mod:`daskrl.testing.environments.process_envs`: a real child process per env that creates and maps a
``/dev/shm`` entry and ignores SIGTERM, as an engine does. Builders are real processes killed from outside; runs are
real ``daskrl train`` runs on the embedded cluster, ended in the five ways of ``daskrl.testing.env_leftovers``.
``doom/basic`` gets the three kills when vizdoom is installed. What the watcher reads of a process is checked on real
processes too (daskrl/runtime/cleanup/procfs.py): every thread's children, the owner mark in its environment, and
the entries it maps or holds open.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from daskrl import Observer, train
from daskrl.envs import EnvError, EnvGroup, make_env, owned_processes
from daskrl.runtime.cleanup import process_watcher, procfs
from daskrl.testing.env_leftovers import CASES, CHECK_SECONDS, EnvTraces, run_case
from daskrl.testing.environments.process_envs import entry_prefix

from ..helpers import REPORT_OFTEN, run_config, slow, wait_for

SPEC = "daskrl.testing.environments.process_envs:with_process"


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:8]


def traces(tag: str) -> EnvTraces:
    return EnvTraces(process_marker=entry_prefix(tag), entry_prefix=entry_prefix(tag))


def nothing_left(t: EnvTraces) -> bool:
    return not t.processes() and not t.entries()


def test_a_close_that_forgets_the_env_s_process_still_ends_it(tag):
    env = make_env(SPEC, seed=0, env_kwargs={"tag": tag, "leaky_close": True})
    t = traces(tag)
    assert len(t.processes()) == 1 and len(t.entries()) == 1
    env.close()
    assert nothing_left(t), (t.processes(), t.entries())


def test_an_env_that_fails_half_built_leaves_nothing(tag):
    with pytest.raises(EnvError, match="failed to reset"):
        make_env(SPEC, seed=0, env_kwargs={"tag": tag, "leaky_close": True, "fail_on_reset": True})
    t = traces(tag)
    assert nothing_left(t), (t.processes(), t.entries())


def test_an_env_that_creates_nothing_starts_no_watcher():
    code = ("import os; from daskrl.envs import make_env; from daskrl.runtime.cleanup import procfs; "
            "envs = [make_env('CartPole-v1', seed=i) for i in range(4)]; "
            "print(sorted(procfs.descendants(os.getpid())))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _builder(tag: str, n: int, last_build_seconds: float = 0.0, then: str = "time.sleep(600)") -> subprocess.Popen:
    """A process that builds ``n`` envs (with close methods that would forget their processes), then runs ``then``;
    the last build takes ``last_build_seconds`` longer, after its process is up."""
    code = textwrap.dedent(f"""
        import sys, time
        from daskrl.envs import make_env
        kwargs = {{"tag": {tag!r}, "leaky_close": True}}
        envs = [make_env({SPEC!r}, seed=i, env_kwargs=kwargs) for i in range({n} - 1)]
        envs.append(make_env({SPEC!r}, seed=99, env_kwargs={{**kwargs, "build_seconds": {last_build_seconds}}}))
        print("built", flush=True)
        {then}
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.mark.parametrize("kill", ["the builder", "its process group"])
def test_a_sigkilled_builder_leaves_no_process_and_no_entry(tag, kill):
    proc = _builder(tag, 3)
    try:
        assert proc.stdout.readline().strip() == "built"
        t = traces(tag)
        assert len(t.processes()) == 3 and len(t.entries()) == 3
        if kill == "the builder":
            proc.send_signal(signal.SIGKILL)  # its envs' processes are re-parented to init and run on
        else:
            os.killpg(proc.pid, signal.SIGKILL)  # they die with it, their entries stay
        proc.wait(10)
        wait_for(lambda: nothing_left(t), timeout=CHECK_SECONDS, what=f"no process or entry of {tag} left")
    finally:
        _kill_group(proc)


def test_an_owner_gone_before_its_watcher_read_a_line_still_has_its_entries_removed(tag):
    """The owner writes its line and exits at once, before the watcher (still starting, as on a loaded machine) reads
    anything: the watcher finds its parent changed and must still read what the pipe holds. Before, it removed
    nothing, and the entries stayed until reboot (what the process-group drill left under the suite's load)."""
    entry = entry_prefix(tag) + "early"
    code = textwrap.dedent(f"""
        import json, os, subprocess, sys
        os.close(os.open("/dev/shm/{entry}", os.O_CREAT | os.O_RDWR, 0o600))
        watcher = subprocess.Popen([sys.executable, {process_watcher.__file__!r}, str(os.getpid())],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        line = json.dumps({{"watch": {{"processes": [], "entries": [{entry!r}]}}}}) + "\\n"
        watcher.stdin.write(line.encode())
        watcher.stdin.flush()
        os._exit(0)
    """)
    try:
        assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
        t = traces(tag)
        wait_for(lambda: not t.entries(), timeout=CHECK_SECONDS, what=f"the entry {entry} removed")
    finally:  # a failure leaves no entry behind
        Path("/dev/shm", entry).unlink(missing_ok=True)


def test_a_builder_that_exits_without_closing_its_envs_leaves_nothing(tag):
    proc = _builder(tag, 2, then="sys.exit(0)")
    try:
        assert proc.stdout.readline().strip() == "built"
        assert proc.wait(30) == 0
        t = traces(tag)
        wait_for(lambda: nothing_left(t), timeout=CHECK_SECONDS, what=f"no process or entry of {tag} left")
    finally:
        _kill_group(proc)


def test_a_group_of_envs_closed_as_a_retired_rollout_worker_closes_them_leaves_nothing(tag):
    """A rollout worker that stops (retired, or its run's components released on a shared cluster) closes its groups
    while its Dask worker process lives on: what the envs' close forgot must end there and then. The envs' processes
    ignore SIGTERM, as VizDoom's engines do: the group ends them all at once, in one wait and one grace (one env after
    the other, the three took 3 x 1.5 s)."""
    group = EnvGroup.from_spec(SPEC, 3, seed=0, env_kwargs={"tag": tag, "leaky_close": True},
                               max_consecutive_failures=1)
    t = traces(tag)
    assert len(t.processes()) == 3 and len(t.entries()) == 3
    started = time.monotonic()
    group.close()
    took = time.monotonic() - started
    assert nothing_left(t), (t.processes(), t.entries())
    assert took < 2 * (owned_processes.OWN_EXIT_SECONDS + process_watcher.GRACE_SECONDS), took


class StopAtFirstRow(Observer):
    """Asks the run to stop at its first row and notes when it asked and when the samplers had stopped."""

    def __init__(self) -> None:
        self.asked: float | None = None
        self.samplers_stopped: float | None = None

    def on_report(self, run, row) -> None:
        if self.asked is None:
            self.asked = time.monotonic()
            run.request_stop("the test's stop")

    def on_stop(self, run) -> None:  # the runner tells the observers once the samplers stopped
        self.samplers_stopped = time.monotonic()


@slow("a 3-rollout-worker run whose envs' closes leave processes that ignore SIGTERM")
def test_a_run_stops_its_rollout_workers_together(tmp_path, tag):
    """Each rollout worker's close ends what its envs' closes left in one wait and one grace (above); the runner
    stops the rollout workers all at once, so a run's end takes one worker's close, not one per worker (one after
    the other, three took 3 x 1.5 s before the last row)."""
    stopper = StopAtFirstRow()
    config = run_config(tmp_path, "together", base=REPORT_OFTEN, env=SPEC,
                        env_kwargs={"tag": tag, "leaky_close": True}, num_workers=3, num_envs_per_worker=2,
                        train_for_env_steps=0, train_for_seconds=60)
    summary = train(config, observers=[stopper])
    assert summary["stop_reason"] == "the test's stop", summary["stop_reason"]
    took = stopper.samplers_stopped - stopper.asked
    print(f"\nsamplers stopped {took:.2f} s after the stop was asked")
    assert took < 2 * (owned_processes.OWN_EXIT_SECONDS + process_watcher.GRACE_SECONDS), took
    assert nothing_left(traces(tag))


@pytest.mark.parametrize("builds", [1, 3])
def test_a_builder_killed_while_an_env_starts_its_process_leaves_nothing(tag, builds):
    """The env's process is up but its build has not returned, so nobody recorded it: it carries its owner's mark
    in its environment. With earlier envs built, the owner's watcher ends it; killed in its first build, the owner
    has no watcher yet, and the next watcher on the host ends it when it starts."""
    proc = _builder(tag, builds, last_build_seconds=60)
    other = None
    try:
        t = traces(tag)
        wait_for(lambda: len(t.processes()) == builds, timeout=30, what=f"{builds} processes of {tag}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        if builds == 1:
            other = _builder(uuid.uuid4().hex[:8], 1)
            assert other.stdout.readline().strip() == "built"
        wait_for(lambda: nothing_left(t), timeout=CHECK_SECONDS, what=f"no process or entry of {tag} left")
    finally:
        _kill_group(proc)
        if other is not None:
            _kill_group(other)


def test_a_killed_watcher_is_started_again_and_told_everything_live(tag):
    envs = [make_env(SPEC, seed=i, env_kwargs={"tag": tag, "leaky_close": True}) for i in range(2)]
    tracker = owned_processes._TRACKER
    tracker.watcher.kill()
    tracker.watcher.wait(10)
    more = make_env(SPEC, seed=2, env_kwargs={"tag": tag, "leaky_close": True})  # a new watcher, told of all three
    assert tracker.watcher.poll() is None and len(tracker.live) >= 3
    # started while an env was built, yet not marked as that env's: no watcher's sweep may end another watcher
    assert process_watcher._marked_owner(tracker.watcher.pid) is None
    owned_processes.close_all([*envs, more])  # as their group would: one wait and one grace for the three
    assert nothing_left(traces(tag))


def run_args(tmp_path: Path, case: str, spec: str, env_kwargs: str, num_envs: int, seconds: float) -> list[str]:
    return ["--env", spec, "--env-kwargs", env_kwargs, "--train-dir", str(tmp_path), "--experiment", case,
            "--num-workers", "2", "--num-envs-per-worker", str(num_envs), "--train-for-env-steps", "0",
            "--train-for-seconds", str(seconds), "--dashboard-address", "", "--report-interval", "0.5"]


def check(result, log: Path) -> None:
    assert result.clean, f"{result.case}: left {result.left_processes} and {result.left_entries} " \
                         f"{CHECK_SECONDS} s after the run ended; {result.log_tail}"
    if result.case in ("worker-kill", "normal-end", "ctrl-c"):
        assert result.returncode == 0, result.log_tail
    if result.case == "worker-kill":
        assert "recovering" in log.read_text(), result.log_tail
    print(f"\n{result.case}: {result.as_dict()}")


@slow("a daskrl train run per case, then 15 s of watching for leftovers")
@pytest.mark.parametrize("case", CASES)
def test_no_process_or_entry_of_an_env_outlives_a_run(tmp_path, tag, case):
    args = run_args(tmp_path, case, SPEC, f'{{"tag": "{tag}", "leaky_close": true}}', 2, 6)
    log = tmp_path / f"{case}.log"
    check(run_case(case, args, traces(tag), expected_envs=4, log=log), log)


@slow("a doom/basic run per case (VizDoom engines), then 15 s of watching for leftovers")
@pytest.mark.parametrize("case", ["worker-kill", "driver-kill", "group-kill"])
def test_no_vizdoom_engine_or_entry_outlives_a_killed_run(tmp_path, case):
    """The kills, which left engines or entries before; all five ends: benchmarks/env_leftovers.py (docs/faults.md)."""
    pytest.importorskip("vizdoom", reason="VizDoom is an extra: pip install 'daskrl[doom]'")
    args = run_args(tmp_path, case, "doom/basic", "{}", 4, 10)
    log = tmp_path / f"{case}.log"
    check(run_case(case, args, EnvTraces("vizdoom/vizdoom", "ViZDoom"), expected_envs=8, log=log), log)


def test_what_an_unseeded_env_creates_in_its_first_reset_is_watched_too(tag):
    """VizDoom starts its game in the first reset, which make_env leaves to the caller when there is no seed."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time, gymnasium as gym
        from daskrl.envs import make_env, register_env
        from daskrl.testing.environments.process_envs import with_process

        class StartsAtReset(gym.Wrapper):
            def __init__(self):
                super().__init__(gym.make("CartPole-v1"))
                self.inner = None

            def reset(self, **kwargs):
                if self.inner is None:
                    self.inner = with_process(tag={tag!r}, leaky_close=True)
                return super().reset(**kwargs)

        register_env("starts-at-reset", StartsAtReset)
        vec = gym.vector.SyncVectorEnv([lambda: make_env("starts-at-reset") for _ in range(2)])
        vec.reset(seed=0)
        print("reset", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "reset"
        t = traces(tag)
        assert len(t.processes()) == 2 and len(t.entries()) == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        wait_for(lambda: nothing_left(t), timeout=CHECK_SECONDS, what=f"no process or entry of {tag} left")
    finally:
        _kill_group(proc)


def test_children_are_every_thread_s_and_a_zombie_is_a_child_but_no_live_process():
    """The kernel's per-thread lists and psutil's scan (where the lists are missing) give the same children."""
    zombie = subprocess.Popen(["true"])  # not waited for: a zombie once it exits
    started, release = [], threading.Event()

    def start_from_a_thread() -> None:
        started.append(subprocess.Popen(["sleep", "30"]))
        release.wait(30)

    thread = threading.Thread(target=start_from_a_thread)
    thread.start()
    try:
        wait_for(lambda: started and procfs.start_time(zombie.pid) is None, what="the zombie and the thread's child")
        sleeper = started[0].pid
        assert {sleeper, zombie.pid} <= set(procfs.children(os.getpid()))
        assert set(procfs.children(os.getpid())) == set(procfs._children_by_scan(os.getpid()))
        assert procfs.start_time(sleeper) is not None and procfs.command_line(sleeper) == ["sleep", "30"]
        assert procfs.command_line(zombie.pid) == [] and procfs.environment(zombie.pid) == {}
    finally:
        release.set()
        thread.join()
        for proc in [*started, zombie]:
            proc.kill()
            proc.wait()
    assert procfs.children(zombie.pid) == [] and procfs.start_time(zombie.pid) is None  # gone: the empty answers


def test_the_owner_mark_is_read_from_a_process_s_environment():
    proc = subprocess.Popen(["sleep", "30"], env={**os.environ, process_watcher.OWNER_VARIABLE: "12:345"})
    try:
        # /proc/PID/environ is empty for a moment after Popen returns: the exec closed the pipe Popen waits on before
        # it laid out the new environment
        mark = wait_for(lambda: process_watcher._marked_owner(proc.pid), timeout=5, what="the environment after exec")
        assert mark == "12:345"
    finally:
        proc.kill()
        proc.wait()
    assert process_watcher._marked_owner(proc.pid) is None
    assert process_watcher._marked_owner(os.getpid()) is None


def test_the_entries_a_process_maps_or_holds_open_are_in_use(tag):
    names = [f"{entry_prefix(tag)}mapped", f"{entry_prefix(tag)}open"]
    for name in names:
        Path(procfs.SHM_DIR, name).write_bytes(b"\0" * 4096)
    code = textwrap.dedent(f"""
        import mmap, os, time
        with open({procfs.SHM_DIR + '/' + names[0]!r}, "r+b") as f:
            mapped = mmap.mmap(f.fileno(), 4096)  # the file is closed, the mapping stays
        held = open({procfs.SHM_DIR + '/' + names[1]!r}, "rb")
        print("ready", flush=True)
        time.sleep(30)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert procfs.shm_in_use([proc.pid], entry_prefix(tag)) == set(names)
        assert procfs.shm_in_use(None, entry_prefix(tag)) == set(names)
        assert procfs.shm_in_use([os.getpid()], entry_prefix(tag)) == set()
    finally:
        proc.kill()
        proc.wait()
        for name in names:
            Path(procfs.SHM_DIR, name).unlink()
    assert procfs.shm_in_use(None, entry_prefix(tag)) == set()
