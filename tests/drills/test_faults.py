"""Fault tolerance on a real LocalCluster with real processes: a SIGKILLed rollout worker or learner is recreated
and the run reaches its budget; envs that raise are rebuilt (or stop the run when they never stop raising); NaN
rewards stop the run with the last good checkpoint intact (a transient NaN is skipped); a SIGKILLed driver leaves
nothing behind (its reaper alone removes its shared memory); a stuck component is named with its stack and a
stuck control call times out; a bad configuration is refused before any process starts.

Faults are injected from outside, as they happen in production: ``kill -9`` of a process found through the bus
registry, and the misbehaving envs of :mod:`daskrl.testing.faults`. Nothing in daskrl is patched. Every test
checks that it leaves no process and no ``/dev/shm/daskrl_*`` segment behind (the ``no_leftovers`` fixture).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch
from distributed import default_client
from distributed.actor import Actor

from daskrl import train
from daskrl.config import Config, ConfigError
from daskrl.errors import TrainingError
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.learning.learner import Learner
from daskrl.runtime import ComponentError
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.runtime.memory.shm import list_segments, owner_pid, sweep
from daskrl.sampling.inference_worker import InferenceWorker
from daskrl.sampling.rollout_worker import RolloutWorker

from ..helpers import (
    REPORT_OFTEN,
    Killer,
    recovery_of,
    registry,
    run_config,
    run_watching_children,
    slow,
    start_cli_cluster,
    worker_pid,
)

pytestmark = slow("fault drills: each run waits for its fault, its recovery and its leftovers to clear")

FAULTS = "daskrl.testing.faults"


# ---- leftovers: processes and shared memory ----


def alive(pid: int | None) -> bool:
    """A process that exists and is not a zombie (an exited child nobody reaped yet holds nothing)."""
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def own_processes() -> dict[int, str]:
    """Live descendants of this process (pid -> command line), less multiprocessing's long-lived helpers: the
    forkserver that embedded workers are forked from and the resource tracker, both started once per process."""
    me, out = os.getpid(), {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.cmdline())
            if p.ppid() == me and ("forkserver" in cmd or "resource_tracker" in cmd):
                continue
        except psutil.Error:  # gone meanwhile
            continue
        out[p.pid] = cmd
    return out


@pytest.fixture(autouse=True)
def no_leftovers():
    """After each test: no new process of ours and no new daskrl segment of ours (its owner is one of our
    processes, or dead) may remain; a killed worker's segments must have been swept."""
    procs_before, segments_before = set(own_processes()), set(list_segments())
    yield
    deadline = time.monotonic() + 15
    while True:
        procs = {pid: cmd for pid, cmd in own_processes().items() if pid not in procs_before}
        segments = [n for n in list_segments() if n not in segments_before
                    and (owner_pid(n) in procs or not alive(owner_pid(n)))]
        if (not procs and not segments) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid in procs:  # do not let one failing test poison the next ones
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not procs, f"processes left behind: {procs}"
    assert not segments, f"shared-memory segments left behind: {segments}"


# ---- helpers ----


def read_rows(config: Config) -> list[dict[str, str]]:
    with open(Path(config.experiment_dir) / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _actor_keys(prefix: str, dask_scheduler=None) -> list[tuple[str, list[str]]]:
    return [(str(ts.key), sorted(ws.address for ws in ts.who_has)) for ts in dask_scheduler.tasks.values()
            if str(ts.key).startswith(prefix) and ts.state == "memory"]


def component_handle(name: str, cls: type) -> ComponentHandle:
    """A driver-side handle on a component of the running training (its actor, found on the scheduler), to read
    its stats or call its control methods as the runner does."""
    client = default_client()
    address = registry()[name]["address"]
    key = next(k for k, who in client.run_on_scheduler(_actor_keys, f"daskrl-{name}-") if address in who)
    return ComponentHandle(name, cls, Actor(cls, address, key), address, client)


def stop_now() -> None:
    """Ask the running training to stop as Ctrl-C does (checkpoint, stop the components, return the summary).
    Only from ``on_report``, which runs inside ``train()``'s loop while its signal handler is installed."""
    os.kill(os.getpid(), signal.SIGINT)


def all_tensors(obj: Any, path: str = "") -> list[tuple[str, torch.Tensor]]:
    """Every tensor (numpy arrays included) in a nested checkpoint state, with its path."""
    if isinstance(obj, torch.Tensor):
        return [(path, obj)]
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "f":
        return [(path, torch.from_numpy(obj))]
    if isinstance(obj, dict):
        return [t for k, v in obj.items() for t in all_tensors(v, f"{path}/{k}")]
    if isinstance(obj, (list, tuple)):
        return [t for i, v in enumerate(obj) for t in all_tensors(v, f"{path}/{i}")]
    return []


# ---- 1. lost components ----


def test_sigkilled_rollout_worker_is_recreated_and_the_run_reaches_its_budget(tmp_path):
    # One rollout worker: every env step after the kill is the recreated worker's.
    budget = 200_000
    config = run_config(tmp_path, "kill_rollout", base=REPORT_OFTEN, num_workers=1, train_for_env_steps=budget,
                        train_for_seconds=150)
    killer = Killer("rollout_0", ready=lambda row: row["env_steps"] >= 20_000)
    summary = train(config, on_report=killer)
    killer.check()

    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    assert summary["env_steps"] >= budget
    record = recovery_of(summary, "rollout_0")
    assert record["role"] == "rollout"
    assert not alive(killer.pid)

    rows = read_rows(config)
    assert len(rows) == len(killer.rows)
    after = rows[killer.rows_before_kill:]
    assert len(after) >= 2, "no report after the kill"
    steps = [int(r["env_steps"]) for r in after]
    assert steps == sorted(steps), f"env steps went backwards after the kill: {steps}"
    assert steps[-1] > steps[0] and steps[-1] >= budget
    returns = [float(r["episode_return_mean"]) for r in after]
    assert all(math.isfinite(x) for x in returns), returns
    # the recreated rollout_0 steps its envs again (its timing shares come from the new incarnation)
    assert killer.rows[-1]["shares"]["rollout_0"].get("env", 0) > 0, killer.rows[-1]["shares"]


def test_sigkilled_learner_restarts_from_the_newest_checkpoint(tmp_path, capsys):
    budget = 300_000
    config = run_config(tmp_path, "kill_learner", base=REPORT_OFTEN, num_workers=1, train_for_env_steps=budget,
                        train_for_seconds=150, checkpoint_interval=1.0, keep_checkpoints=100)
    store = CheckpointStore(Path(config.experiment_dir) / "checkpoints")
    newest_at_kill: list[Path] = []

    def right_after_the_first_checkpoint() -> None:
        # Kill just after the runner wrote a checkpoint: the run then has ~1 s to notice the loss before it asks
        # the dead learner for the next one (see docs/faults.md: a loss that the runner meets first in
        # checkpoint() stops the run).
        deadline = time.monotonic() + 60
        while store.latest() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        newest_at_kill.append(store.latest())

    killer = Killer("learner", ready=lambda row: True, wait=right_after_the_first_checkpoint)
    summary = train(config, on_report=killer)
    out = capsys.readouterr().out
    killer.check()

    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    assert summary["env_steps"] >= budget
    record = recovery_of(summary, "learner")
    assert record["role"] == "learner"

    restart_from = newest_at_kill[0]
    assert f"learner restarts from {restart_from.name}" in out, out
    restart_state = store.load(restart_from)
    restart_version = restart_state["policy_version"]
    later = [store.load(p) for p in sorted(store.directory.glob("checkpoint_*.pt")) if p.name > restart_from.name]
    assert later, "no checkpoint after the restart"
    # the restarted learner went on from that checkpoint: policy versions, training steps and Adam's step counts
    # continue from it (the first checkpoint after the restart may come before its first training step)
    assert [st["policy_version"] for st in later] == sorted(st["policy_version"] for st in later)
    assert later[0]["policy_version"] > restart_version
    assert later[-1]["train_steps"] > restart_state["train_steps"]
    adam = [max(float(s["step"]) for s in st["optimizer"]["state"].values()) for st in (restart_state, later[-1])]
    assert adam[1] > adam[0], adam
    assert summary["policy_version"] > restart_version + 2

    rows = read_rows(config)
    after = rows[killer.rows_before_kill:]
    steps = [int(r["env_steps"]) for r in after]
    versions = [int(r["policy_version"]) for r in after]
    assert steps == sorted(steps), f"env steps went backwards after the kill: {steps}"
    assert steps[-1] > steps[0]
    assert versions[-1] > restart_version + 2 and versions[-1] > versions[0], versions
    assert all(math.isfinite(float(r["loss"])) for r in after[-3:]), after[-3:]


def test_learner_lost_before_its_first_checkpoint_restarts_from_the_newest_published_parameters(tmp_path, capsys):
    config = run_config(tmp_path, "kill_early", base=REPORT_OFTEN, num_workers=1, train_for_env_steps=250_000,
                        train_for_seconds=150, checkpoint_interval=10_000.0)  # no checkpoint before the end of the run
    killer = Killer("learner", ready=lambda row: row["policy_version"] >= 15)
    summary = train(config, on_report=killer)
    out = capsys.readouterr().out
    killer.check()
    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    recovery_of(summary, "learner")

    version_at_kill = int(killer.rows[killer.rows_before_kill - 1]["policy_version"])
    said = [line for line in out.splitlines() if "learner restarts from the newest published parameters" in line]
    assert len(said) == 1, out
    restarted_at = int(said[0].split("policy version ")[1].split(",")[0])
    assert restarted_at >= version_at_kill - 2, (restarted_at, version_at_kill)  # what the samplers held by then
    versions = [int(r["policy_version"]) for r in read_rows(config)[killer.rows_before_kill:]]
    assert min(versions) >= restarted_at - 2 and versions[-1] > restarted_at, \
        f"the policy versions started again from the beginning: {versions}"
    # the normalizers went on from the statistics published with the weights: a fresh one would have counted
    # exactly the samples the new learner trained on, one count per sample
    final = CheckpointStore(Path(config.experiment_dir) / "checkpoints").load("latest")
    assert final["policy_version"] > restarted_at
    assert final["returns"]["count"] > final["samples_trained"], (final["returns"], final["samples_trained"])
    assert final["obs_rms"]["count"] > final["samples_trained"], (final["obs_rms"]["count"], final["samples_trained"])


@pytest.mark.parametrize("lost", ["learner_1", "learner"])
def test_a_killed_learner_of_a_group_reforms_the_group_and_training_goes_on(tmp_path, lost):
    """Two data-parallel learners; one is SIGKILLed (a member, or the leader that publishes): it is recreated, the
    group is formed again (generation 2) from the leader's weights, the members hold the same weights after every
    step of the new generation, and the policy goes on from where it was, to the end of the budget."""
    config = run_config(tmp_path, f"group_{lost}", base=REPORT_OFTEN, num_learners=2, train_for_env_steps=400_000,
                        train_for_seconds=150, checkpoint_interval=2.0)
    killer = Killer(lost, ready=lambda row: row["policy_version"] >= 15)
    summary = train(config, on_report=killer)
    killer.check()
    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    record = recovery_of(summary, lost)
    assert record["role"] == ("learner group member" if lost == "learner_1" else "learner")
    learners = summary["learners"]
    assert [learners[n]["generation"] for n in ("learner", "learner_1")] == [2, 2]
    leader, member = (dict(map(tuple, learners[n]["digests"])) for n in ("learner", "learner_1"))
    common = sorted(set(leader) & set(member))
    assert len(common) >= 5 and all(leader[s] == member[s] for s in common), (leader, member)
    version_at_kill = int(killer.rows[killer.rows_before_kill - 1]["policy_version"])
    versions = [int(r["policy_version"]) for r in read_rows(config)[killer.rows_before_kill:]]
    assert versions[-1] > version_at_kill + 10, versions
    assert min(versions) >= version_at_kill - 20, f"the policy started again from the beginning: {versions}"


def test_recreated_rollout_and_inference_workers_get_the_setup_the_first_ones_got(tmp_path):
    """The setups come from one function, for the first incarnation and for every recreated one: a recreated
    inference worker used to lose --inference-precision (and fall back to 'auto')."""
    config = run_config(tmp_path, "setups", base=REPORT_OFTEN, inference="remote", num_workers=1, num_inference_workers=1,
                        num_envs_per_worker=8, inference_precision="float32", train_for_env_steps=0,
                        train_for_seconds=120)
    seen: dict[str, list] = {"rollout_0": [], "inference_0": []}
    precision: list[str] = []
    errors: list[BaseException] = []

    def setup_of(name: str, cls: type):
        return component_handle(name, cls).call("get_setup", timeout=30)

    def drill() -> None:
        try:
            for name, cls in (("rollout_0", RolloutWorker), ("inference_0", InferenceWorker)):
                seen[name].append(setup_of(name, cls))
                pid = worker_pid(name)
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 60
                while registry().get(name, {}).get("pid") in (None, pid):
                    assert time.monotonic() < deadline, f"{name} was not recreated"
                    time.sleep(0.2)
                time.sleep(1.0)  # configured and started
                seen[name].append(setup_of(name, cls))
            precision.append(component_handle("inference_0", InferenceWorker).call("stats")["inference_precision"])
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=drill, daemon=True)

    def on_report(row: dict) -> None:
        if row["env_steps"] > 5_000 and thread.ident is None:
            thread.start()

    summary = train(config, on_report=on_report)
    thread.join(30)
    assert not errors, errors
    assert {r["component"] for r in summary["recoveries"]} == {"rollout_0", "inference_0"}, summary["recoveries"]
    for name, (first, recreated) in seen.items():
        assert dataclasses.is_dataclass(first) and recreated == first, f"{name}: {first} != {recreated}"
    assert seen["inference_0"][1].policy.inference_precision == "float32"
    assert precision == ["float32"]


# ---- 2. failing envs ----


def test_env_that_raises_now_and_then_is_rebuilt_and_the_run_goes_on(tmp_path, capsys):
    budget = 60_000
    config = run_config(tmp_path, "flaky", base=REPORT_OFTEN, num_workers=1, env=f"{FAULTS}:flaky",
                        env_kwargs={"every": 300}, train_for_env_steps=budget, train_for_seconds=120)
    failures = []

    def on_report(row: dict) -> None:
        stats = component_handle("rollout_0", RolloutWorker).call("stats", timeout=10)
        failures.append(int(stats["counters"].get("env_failures", 0)))

    summary = train(config, on_report=on_report)
    out = capsys.readouterr().out

    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    assert summary["env_steps"] >= budget
    assert failures[-1] >= 2, failures  # env 0 takes >= 1,800 steps: one failure per 300 of them
    warnings = [line for line in out.splitlines() if "raised in step and was rebuilt" in line]
    assert len(warnings) == 1, out  # once per distinct error, not once per failure
    assert f"'{FAULTS}:flaky'" in warnings[0] and "injected failure at step 300" in warnings[0]
    assert summary["recoveries"] == []
    assert math.isfinite(summary["episode_return_mean"])


def test_env_that_always_raises_stops_the_run_quickly(tmp_path):
    config = run_config(tmp_path, "broken", base=REPORT_OFTEN, num_workers=1, env=f"{FAULTS}:always_failing",
                        env_failure_limit=5, train_for_env_steps=100_000, train_for_seconds=120)
    t0 = time.monotonic()
    with pytest.raises(TrainingError) as info:
        train(config)
    took = time.monotonic() - t0
    message = str(info.value)
    print(f"\nalways-failing env stopped the run in {took:.1f} s: {message}")
    assert f"'{FAULTS}:always_failing'" in message
    assert "failures in a row" in message and "rollout_0" in message
    assert took < 60


# ---- 3. NaN ----


def test_persistent_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    flag = tmp_path / "nan_from_now_on"
    config = run_config(tmp_path, "nan", base=REPORT_OFTEN, num_workers=1, env=f"{FAULTS}:nan_reward",
                        env_kwargs={"flag": str(flag)}, nan_tolerance=3, batch_size=256, num_batches_per_epoch=2,
                        checkpoint_interval=6.0, keep_checkpoints=100, train_for_env_steps=0, train_for_seconds=120)
    store = CheckpointStore(Path(config.experiment_dir) / "checkpoints")
    good: list[str] = []

    def nan_right_after_a_checkpoint() -> None:
        deadline = time.monotonic() + 60
        while store.latest() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        good.extend(p.name for p in store.directory.glob("checkpoint_*.pt"))
        flag.touch()

    threading.Thread(target=nan_right_after_a_checkpoint, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(TrainingError) as info:
        train(config)
    message = str(info.value)
    print(f"\nNaN rewards stopped the run after {time.monotonic() - t0:.1f} s: {message}")
    assert good, "no checkpoint was written before the NaNs"
    assert "NaN/inf" in message and "last good checkpoint" in message and "learner" in message

    latest = store.latest()
    assert latest is not None and latest.name in good, (latest, good)  # nothing written after the NaNs began
    state = store.load("latest")
    tensors = all_tensors(state)
    assert len(tensors) > 5
    bad = [path for path, t in tensors if t.is_floating_point() and not torch.isfinite(t).all()]
    assert not bad, f"non-finite tensors in the last good checkpoint: {bad}"


def test_transient_nan_is_skipped_and_training_goes_on(tmp_path):
    budget = 60_000
    config = run_config(tmp_path, "nan_once", base=REPORT_OFTEN, num_workers=1, env=f"{FAULTS}:nan_reward",
                        env_kwargs={"at_steps": [5_000]}, nan_tolerance=3, train_for_env_steps=budget,
                        train_for_seconds=120)
    skipped = []

    def on_report(row: dict) -> None:
        stats = component_handle("learner", Learner).call("stats", timeout=10)
        skipped.append(int(stats["counters"].get("skipped_updates", 0)))

    summary = train(config, on_report=on_report)
    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    assert summary["env_steps"] >= budget
    assert skipped[-1] > 0, skipped  # the batch with the NaN reward was not trained on
    rows = read_rows(config)
    assert math.isfinite(float(rows[-1]["loss"])), rows[-1]
    assert int(rows[-1]["policy_version"]) > 3


# ---- 4. driver killed ----


@contextlib.contextmanager
def sigkilled_cli_run(tmp_path: Path):
    """A `daskrl train` driver (embedded cluster, one worker) that made progress and was then SIGKILLed.
    Yields (run_id, pids of its descendants, monotonic time of the kill); kills and sweeps what is left after."""
    old = run_config(tmp_path, "old", base=REPORT_OFTEN, num_workers=1)
    log = open(tmp_path / "old.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daskrl", "train", "--env", "CartPole-v1", "--train-dir", str(tmp_path),
         "--experiment", "old", "--train-for-seconds", "120", "--train-for-env-steps", "0", "--num-workers", "1",
         "--dashboard-address", "", "--report-interval", "0.5"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    old_pids: set[int] = set()
    run_id = ""
    try:
        deadline = time.monotonic() + 90
        while not (Path(old.experiment_dir) / "metrics.csv").exists() or not read_rows(old) or \
                int(read_rows(old)[-1]["env_steps"]) == 0:
            assert proc.poll() is None, (tmp_path / "old.log").read_text()
            assert time.monotonic() < deadline, "the old run never reported progress"
            time.sleep(0.2)
        old_pids = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        run_ids = {name.split("_")[1] for name in list_segments() if owner_pid(name) in old_pids}
        assert len(run_ids) == 1, (run_ids, list_segments())
        run_id = run_ids.pop()
        old_segments = list_segments(run_id)
        # forkserver + 2 workers + the reaper at least
        assert old_segments and len(old_pids) >= 4, (old_segments, old_pids)

        proc.send_signal(signal.SIGKILL)  # the driver only: its workers and forkserver are left to themselves
        proc.wait(10)
        yield run_id, old_pids, time.monotonic()
    finally:
        log.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pid in old_pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if run_id:
            sweep(run_id, dead_only=False)


def test_sigkilled_driver_leaves_no_process_and_no_segment(tmp_path):
    with sigkilled_cli_run(tmp_path) as (run_id, old_pids, killed):
        # The old workers exit within ~2 s (Dask's nanny pipe ends them with os._exit, so they cannot unlink their
        # segments); the reaper and the new run's workers sweep segments whose owner is dead (docs/faults.md).
        checks: list[tuple[float, list[str], list[int]]] = []  # (seconds since the kill, segments, pids)
        stopping: list[bool] = []

        def on_report(row: dict) -> None:
            segments, pids = list_segments(run_id), sorted(p for p in old_pids if alive(p))
            checks.append((time.monotonic() - killed, segments, pids))
            if ((not segments and not pids) or checks[-1][0] - checks[0][0] > 10) and not stopping:
                stopping.append(True)
                stop_now()

        new = run_config(tmp_path, "new", base=REPORT_OFTEN, num_workers=1, train_for_env_steps=0, train_for_seconds=60)
        summary = train(new, on_report=on_report)
        assert "SIGINT" in summary["stop_reason"], summary["stop_reason"]
        started = checks[0][0]
        clean = [c for c in checks if not c[1] and not c[2]]
        assert clean, f"the old run's segments/processes remain {checks[-1][0] - started:.1f} s after the new run " \
                      f"started: {checks[-1][1:]}"
        print(f"\nold run (driver SIGKILLed): all its processes and segments gone {clean[0][0]:.1f} s after the kill "
              f"(new run's first report at {started:.1f} s)")
        print("timeline (s since the kill, old segments left, old processes left):",
              [(round(t, 1), len(s), len(p)) for t, s, p in checks])
        assert clean[0][0] - started <= 10


def test_reaper_alone_removes_a_sigkilled_drivers_segments_and_exits(tmp_path):
    """No new run starts: only the reaper (a bare interpreter that imports no dask, numpy or torch) can clean up."""
    with sigkilled_cli_run(tmp_path) as (run_id, old_pids, killed):
        def cmdline(pid: int) -> list[str]:
            try:
                return psutil.Process(pid).cmdline()
            except psutil.Error:  # a worker that exited meanwhile
                return []

        reapers = [pid for pid in old_pids if any(arg.endswith("reaper.py") for arg in cmdline(pid))]
        assert len(reapers) == 1, [cmdline(p) for p in old_pids]
        reaper = psutil.Process(reapers[0])
        assert reaper.memory_info().rss < 40 * 2**20, f"the reaper holds {reaper.memory_info().rss / 2**20:.0f} MiB"
        deadline = killed + 30
        while list_segments(run_id) or any(alive(p) for p in old_pids):
            assert time.monotonic() < deadline, \
                f"30 s after the kill: segments {list_segments(run_id)}, processes " \
                f"{[p for p in old_pids if alive(p)]}"
            time.sleep(0.2)
        print(f"\nreaper: the killed run's segments removed and every process gone "
              f"{time.monotonic() - killed:.1f} s after the kill")


# ---- 5. hangs ----


def test_stuck_component_is_named_with_its_stack_and_stuck_calls_time_out(tmp_path, capsys):
    config = run_config(tmp_path, "hang", base=REPORT_OFTEN, num_workers=1, env=f"{FAULTS}:hanging",
                        env_kwargs={"after": 2_000, "seconds": 8}, heartbeat_timeout=3, train_for_env_steps=0,
                        train_for_seconds=60)
    calls: list[tuple[float, str]] = []

    def probe_when_stuck() -> None:
        handle = component_handle("rollout_0", RolloutWorker)
        deadline = time.monotonic() + 40
        while handle.call("stats", timeout=10)["heartbeat_age_s"] < 1.5:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        t0 = time.monotonic()
        try:  # a control method that needs the component's own thread, which is stuck in env.step
            handle.call("on_own_thread", os.getpid, timeout=1)
            calls.append((time.monotonic() - t0, "answered"))
        except ComponentError as exc:
            calls.append((time.monotonic() - t0, str(exc)))

    prober = threading.Thread(target=probe_when_stuck, daemon=True)
    seen: list[str] = []  # what the runner printed, read at each report
    stopping: list[bool] = []

    def on_report(row: dict) -> None:
        seen.append(capsys.readouterr().out)
        if prober.ident is None:
            prober.start()
        if calls and "has been silent for" in "".join(seen) and not stopping:
            stopping.append(True)
            stop_now()

    train(config, on_report=on_report)
    out = "".join(seen) + capsys.readouterr().out
    prober.join(30)

    assert calls, "the component never looked stuck"
    took, message = calls[0]
    print(f"\nstuck control call answered in {took:.2f} s: {message}")
    assert "rollout_0" in message and "did not answer on_own_thread() within 1" in message, message
    assert took < 5.0  # its 1 s timeout, not the default 30 s (room for a loaded 2-core machine)

    warnings = [w for w in out.split("daskrl: warning: ") if "component 'rollout_0' has been silent for" in w]
    assert len(warnings) == 1, out  # once per silence, not at every poll
    warning = warnings[0]
    assert "in _sleep_in_env_step" in warning, f"the warning does not show where the component hangs: {warning}"
    assert "testing/faults.py" in warning


# ---- 6. bad configuration ----


def test_bad_configuration_is_refused_before_any_process_starts(tmp_path):
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    config = Config().replace(train_dir=str(tmp_path), experiment="bad", dashboard_address="",
                              num_workers=0, gamma=1.5, heartbeat_timeout=-1)
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as info:
        train(config)
    took = time.monotonic() - t0
    problems = info.value.problems
    assert len(problems) == 3, problems
    assert str(info.value).count("\n") == 3  # a heading and one line per problem
    assert any("--num-workers" in p for p in problems) and any("--gamma" in p for p in problems)
    assert any("--heartbeat-timeout" in p for p in problems)
    assert took < 5.0  # no cluster was started (that takes seconds more): room for a loaded 2-core machine
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children_before, "a process was started"
    assert not (tmp_path / "bad").exists(), "the experiment directory was created for a refused configuration"

    # the command line too: exit status 2, the three lines, and the CLI's checks start no process, not even the
    # forkserver (daskrl.cli: the `daskrl` command starts that server before it reads the options, daskrl/__main__.py,
    # and ends it on the way out)
    code, err, started = run_watching_children([sys.executable, "-m", "daskrl.cli", "train", "--train-dir",
                                                str(tmp_path), "--experiment", "bad", "--num-workers", "0", "--gamma",
                                                "1.5", "--heartbeat-timeout", "-1"])
    assert code == 2, err
    assert err.count("\n  --") == 3 and "Traceback" not in err, err
    assert not started, f"the CLI started processes for a refused configuration: {started}"


def test_only_a_start_failure_that_looks_like_a_lost_worker_waits_for_the_scheduler_to_tell():
    """An env that raises while it is built fails the run at once (it waited 5 s for a worker loss the scheduler
    would never report); a connection that failed, a call that timed out or a cancelled task get those seconds."""
    from concurrent.futures import CancelledError

    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker

    from daskrl.errors import ComponentError, EnvError
    from daskrl.runtime.actors.handles import looks_like_a_lost_worker

    def failed(cause: BaseException) -> ComponentError:
        try:
            raise ComponentError("component 'rollout_0': configure() failed") from cause
        except ComponentError as exc:
            return exc

    assert not looks_like_a_lost_worker(failed(EnvError("Environment 'x' failed to build: MissingResourceError")))
    assert not looks_like_a_lost_worker(failed(ValueError("bad observation")))
    assert not looks_like_a_lost_worker(KeyError("a bug in the driver"))
    for loss in (OSError("Unable to contact Actor's worker"), TimeoutError(), CancelledError(),
                 FutureCancelledError("k", reason="lost"), KilledWorker("task", "worker", 3)):
        assert looks_like_a_lost_worker(failed(loss)), loss


def test_a_worker_lost_while_the_fleet_starts_gets_the_fleet_one_more_start(tmp_path, capsys):
    """A rollout worker's env SIGKILLs its ``dask worker`` process while the fleet is being created (the first
    ``daskrl train --env doom/basic`` of a fresh install lost a worker that way and the run ended with "configure()
    failed: OSError: Unable to contact Actor's worker"): the nanny brings the worker back, the run says what
    happened in one line, starts its fleet again on the workers there are, and trains to its budget."""
    marker = tmp_path / "killed"
    with start_cli_cluster(tmp_path, 2) as cluster:
        config = run_config(tmp_path, "lost_at_start", scheduler=cluster["address"], num_workers=1,
                            env=f"{FAULTS}:kills_its_worker_once", env_kwargs={"marker": str(marker)},
                            train_for_env_steps=20_000, elastic=False)
        summary = train(config)
    out = capsys.readouterr().out
    assert marker.exists(), "the env never killed its worker"
    assert "was lost while the fleet started" in out and "starting the fleet again, once" in out, out
    assert summary["env_steps"] >= 20_000 and summary["stop_reason"].startswith("reached"), summary
