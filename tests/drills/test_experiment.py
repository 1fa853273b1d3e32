"""An experiment is owned by one live run: a second run is refused while the first goes on untouched, a lock left
by a killed run is taken over with a note, and a new run on an existing experiment needs --resume or --overwrite."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daskrl import train
from daskrl.config import Config, ConfigError
from daskrl.driver.launch.experiment import ExperimentInUseError, ExperimentLock, open_experiment
from daskrl.runtime.cleanup.semaphores import mapped_semaphores, on_disk
from daskrl.runtime.memory.shm import list_segments, owner_pid, pid_alive

from ..helpers import run_config, slow


def cli(tmp_path: Path, experiment: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "daskrl", "train", "--env", "CartPole-v1", "--train-dir", str(tmp_path),
            "--experiment", experiment, "--dashboard-address", "", "--num-workers", "1", "--report-interval", "0.5",
            *flags]


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def wait_for_rows(path: Path, proc: subprocess.Popen, n: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or len(csv_rows(path)) < n:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "the run ended early"
        assert time.monotonic() < deadline, f"no {n} report rows in {path} within {timeout} s"
        time.sleep(0.2)


# ---- the lock itself ----


def test_lock_refuses_a_second_owner_and_names_the_first(tmp_path):
    first, second = ExperimentLock(str(tmp_path)), ExperimentLock(str(tmp_path))
    assert first.acquire() == ""
    with pytest.raises(ExperimentInUseError) as info:
        second.acquire()
    message = str(info.value)
    assert f"pid {os.getpid()}" in message and "choose another --experiment" in message
    assert "\n" not in message
    first.release()
    assert second.acquire() == "", "a cleanly released lock is no stale lock"
    second.release()
    assert (tmp_path / ".lock").read_text() == "", "a clean release leaves no owner record"


def test_a_lock_whose_owner_died_is_taken_over_with_a_note(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not pid_alive(dead.pid)
    (tmp_path / ".lock").write_text(json.dumps({"host": "elsewhere", "pid": dead.pid, "started": time.time()}))
    lock = ExperimentLock(str(tmp_path))
    note = lock.acquire()
    assert f"pid {dead.pid}" in note and "ended without releasing it" in note
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
    lock.release()


def test_refusals_leave_no_new_directory_and_resume_with_overwrite_is_a_contradiction(tmp_path):
    with pytest.raises(ConfigError, match="no checkpoint to resume from"):
        open_experiment(str(tmp_path / "new"), resume=True, overwrite=False)
    assert not (tmp_path / "new").exists()
    with pytest.raises(ConfigError, match="contradict"):
        open_experiment(str(tmp_path / "new"), resume=True, overwrite=True)
    assert not (tmp_path / "new").exists()


# ---- whole runs ----


@slow("two CLI runs at once")
def test_a_second_run_is_refused_while_the_first_goes_on_and_its_csv_stays_intact(tmp_path):
    # the first run lasts until told to stop (Ctrl-C), so a slow machine cannot end it before the refusals are tried
    first = subprocess.Popen(cli(tmp_path, "same", "--train-for-seconds", "120", "--train-for-env-steps", "0"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = tmp_path / "same" / "metrics.csv"
    try:
        wait_for_rows(metrics, first, 3)
        for extra in ([], ["--resume"], ["--overwrite"]):
            t0 = time.monotonic()
            second = subprocess.run(cli(tmp_path, "same", "--train-for-seconds", "5", *extra), capture_output=True,
                                    text=True, timeout=60)
            took = time.monotonic() - t0
            assert second.returncode == 2, (extra, second.stdout, second.stderr)
            err = second.stderr.strip()
            assert err.count("\n") == 0 and "Traceback" not in err, err
            assert f"is in use by the run with pid {first.pid}" in err, err
            assert took < 15, f"the refusal of {extra} took {took:.1f} s"
        assert first.poll() is None, "the first run ended before all refusals were tried"
        first.send_signal(signal.SIGINT)  # as Ctrl-C: checkpoint, stop, exit 0
        assert first.wait(60) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    raw = metrics.read_bytes()
    assert b"\x00" not in raw
    rows = csv_rows(metrics)
    assert raw.count(b"time_s") == 1, "the header was written twice"
    times, steps = [float(r["time_s"]) for r in rows], [int(r["env_steps"]) for r in rows]
    assert times == sorted(times) and steps == sorted(steps) and len(rows) >= 10, rows
    assert (tmp_path / "same" / ".lock").read_text() == ""


@slow("a CLI run SIGKILLed, then resumed")
def test_resume_takes_over_the_lock_of_a_killed_run(tmp_path):
    semaphores_before = on_disk()
    killed = subprocess.Popen(cli(tmp_path, "crash", "--train-for-seconds", "60", "--train-for-env-steps", "0",
                                  "--checkpoint-interval", "1"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    checkpoints = tmp_path / "crash" / "checkpoints"
    try:
        wait_for_rows(tmp_path / "crash" / "metrics.csv", killed, 1)
        deadline = time.monotonic() + 60
        while not list(checkpoints.glob("checkpoint_*.pt")):
            assert time.monotonic() < deadline and killed.poll() is None, "no checkpoint before the kill"
            time.sleep(0.1)
        os.killpg(killed.pid, signal.SIGKILL)  # the driver and its workers, all at once
        killed.wait(10)
        resumed = subprocess.run(cli(tmp_path, "crash", "--resume", "--train-for-seconds", "3"), capture_output=True,
                                 text=True, timeout=120)
    finally:
        if killed.poll() is None:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"took over the lock of the run with pid {killed.pid}" in resumed.stdout, resumed.stdout
    deadline = time.monotonic() + 30  # the killed run's reaper removes what its workers owned
    while [n for n in list_segments() if not pid_alive(owner_pid(n) or 0)]:
        assert time.monotonic() < deadline, list_segments()
        time.sleep(0.2)
    # the kill took Python's resource tracker with it: the reaper removes the semaphores of Dask's worker processes
    def leaked() -> set[str]:
        return on_disk() - semaphores_before - mapped_semaphores()

    while leaked():
        assert time.monotonic() < deadline, leaked()
        time.sleep(0.2)


def test_a_new_run_on_an_existing_experiment_needs_resume_or_overwrite(tmp_path):
    def config(**options) -> Config:
        return run_config(tmp_path, "again", num_workers=1, train_for_env_steps=20_000, report_interval=0.5, **options)

    first = train(config())
    exp = Path(first["experiment_dir"])
    (exp / "notes.txt").write_text("the user's own file")
    def snapshot() -> dict:  # the lock file aside: a refused run holds the lock while it looks
        return {p: p.stat().st_mtime_ns for p in exp.rglob("*") if p.name != ".lock"}

    before = snapshot()
    with pytest.raises(ConfigError, match="--overwrite") as info:
        train(config())
    assert "already exists" in str(info.value)
    assert snapshot() == before, "a refused run changed the experiment"

    second = train(config(overwrite=True, seed=1))
    assert not (exp / "notes.txt").exists()
    assert json.loads((exp / "config.json").read_text())["run"]["seed"] == 1
    rows = csv_rows(exp / "metrics.csv")
    assert int(rows[-1]["env_steps"]) == second["env_steps"] and float(rows[0]["time_s"]) < 10


def test_a_resume_trains_the_network_its_experiment_saved_whatever_the_defaults_now(tmp_path):
    """A DQN experiment saved before ``--value-encoder`` existed trained two MLPs; today's DQN default shares one
    trunk. Its resume builds the saved network (the learner could not load the checkpoint otherwise), other model
    options left out come from its config.json too, and one given that differs is refused, naming the fix."""
    from daskrl.config.algo_options import describe_algo_defaults
    from daskrl.config.env_defaults import describe as describe_env_defaults
    from daskrl.driver.launch.preflight import preflight

    saved = run_config(tmp_path, "old", env="CartPole-v1", algo="dqn", hidden_sizes=[32, 32])
    preflight(saved)
    layout = json.loads(saved.to_json())
    del layout["model"]["value_encoder"]  # as a run saved before the option was written
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps(layout))

    fresh = run_config(tmp_path, "new", env="CartPole-v1", algo="dqn")
    preflight(fresh)
    assert (fresh.model.value_encoder, fresh.model.hidden_sizes) == ("shared", [256, 256])

    resumed = run_config(tmp_path, "old", env="CartPole-v1", algo="dqn", resume=True)
    preflight(resumed)
    assert (resumed.model.value_encoder, resumed.model.hidden_sizes) == ("auto", [32, 32])
    assert "value-encoder" not in describe_algo_defaults(resumed) and not describe_env_defaults(resumed)
    preflight(resumed)  # the runner checks again: the same network
    assert (resumed.model.value_encoder, resumed.model.hidden_sizes) == ("auto", [32, 32])

    changed = run_config(tmp_path, "old", env="CartPole-v1", algo="dqn", resume=True, hidden_sizes=[64, 64],
                         init_log_std=-0.5)  # a starting value is no other network
    with pytest.raises(ConfigError) as refused:
        preflight(changed)
    assert refused.value.problems == [
        f"--resume: --hidden-sizes 64 64 builds another network than experiment {str(tmp_path / 'old')!r} trained "
        "(--hidden-sizes 32 32 in its config.json): leave --hidden-sizes out to continue it, or train a new "
        "experiment"]
