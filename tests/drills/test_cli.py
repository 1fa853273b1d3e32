"""The `daskrl` command as a user runs it, each test in processes of its own: train, Ctrl-C, resume, enjoy, sample,
--serial (every component in the driver process), and clear errors (exit status 2, one readable message) for a bad
env, bad options or a missing experiment."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daskrl.runtime.memory.shm import list_segments

from ..helpers import slow

DASKRL = [sys.executable, "-m", "daskrl"]


def run(args: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(DASKRL + args, capture_output=True, text=True, timeout=timeout)


def rows(path: str) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_bad_env_and_bad_options_exit_2_with_one_readable_message(tmp_path):
    t0 = time.monotonic()
    out = run(["train", "--env", "CartPol-v1", "--train-dir", str(tmp_path)], timeout=60)
    assert out.returncode == 2
    assert "did you mean 'CartPole-v1'" in out.stderr and "Traceback" not in out.stderr
    out = run(["train", "--num-envs-per-worker", "10", "--worker-num-splits", "3", "--gamma", "2"], timeout=60)
    assert out.returncode == 2
    assert "--worker-num-splits 3 does not divide" in out.stderr and "--gamma must be within [0, 1]" in out.stderr
    assert time.monotonic() - t0 < 30
    assert not os.listdir(tmp_path)


def interrupted(tmp_path: Path, experiment: str, signals: int) -> tuple[subprocess.Popen, str]:
    """A ``daskrl train`` in a process group of its own, as a terminal runs it, sent ``signals`` SIGINTs (as Ctrl-C
    reaches the whole foreground group) once its first row shows training; returns it, ended, and its output."""
    proc = subprocess.Popen(DASKRL + ["train", "--train-dir", str(tmp_path), "--experiment", experiment,
                                      "--train-for-seconds", "120", "--dashboard-address", ""],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            if "env steps" in line and "| fps" in line or time.monotonic() > deadline:
                break
        seen = []
        for k in range(signals):
            os.killpg(proc.pid, signal.SIGINT)
            # the next one once the driver has taken this one: two signals that land before Python's handler runs
            # are one (a loaded machine once turned a second Ctrl-C into none)
            while k + 1 < signals and time.monotonic() < deadline and (line := proc.stdout.readline()):
                seen.append(line)
                if "stopping: SIGINT received" in line:
                    break
        out, _ = proc.communicate(timeout=60)
        out = "".join(seen) + out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, out


@slow("a CLI run stopped by SIGINT")
def test_ctrl_c_checkpoints_and_exits_0(tmp_path):
    """Ctrl-C in a terminal reaches the whole foreground process group: the driver must checkpoint and exit 0,
    the embedded workers must not die with tracebacks first."""
    proc, out = interrupted(tmp_path, "c", signals=1)
    assert proc.returncode == 0, out[-2000:]
    assert "stopping: SIGINT received" in out
    assert "KeyboardInterrupt" not in out
    checkpoints = os.listdir(tmp_path / "c" / "checkpoints")
    assert any(name.startswith("checkpoint_") for name in checkpoints)


@slow("a CLI run stopped by two SIGINTs")
def test_a_second_ctrl_c_stops_at_once_in_one_line_and_leaves_nothing(tmp_path):
    """A second Ctrl-C while the run stops in order (an impatient user, or ``timeout`` forwarding a signal that the
    process group got too) ends the command at once: one line, exit 130, no traceback, no process or shared memory
    left."""
    before = set(list_segments())
    proc, out = interrupted(tmp_path, "c2", signals=2)
    assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]
    assert "daskrl: interrupted again: stopped without waiting for the run to stop in order" in out, out[-2000:]
    deadline = time.monotonic() + 20  # the embedded workers end with their nanny, a moment after the driver
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_alive(proc.pid), "processes of the run outlived it"
    # the reaper (its own session, so not in the group) sweeps each second for ten seconds after the driver died
    deadline = time.monotonic() + 15
    while (left := set(list_segments()) - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"shared memory left after the run: {sorted(left)}"


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@slow("three CLI runs")
def test_stop_at_50k_resume_and_enjoy(tmp_path):
    train_dir = str(tmp_path)
    first = run(["train", "--train-dir", train_dir, "--experiment", "r", "--train-for-env-steps", "50000",
                 "--dashboard-address", ""])
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    # where start-up went, from the process's launch, phase by phase; then the first training step
    started = re.search(r"daskrl: started in ([\d.]+) s \(imports ([\d.]+), checks ([\d.]+), cluster ([\d.]+), "
                        r"placement ([\d.]+), components ([\d.]+)\)", first.stdout)
    assert started, first.stdout[-2000:]
    ready, *phases = (float(x) for x in started.groups())
    assert phases[0] > 0.1 and abs(sum(phases) - ready) < 0.05, started.group(0)  # the interpreter counts
    # the learner's first step needs its worker and samples: after the cluster (it may end a few milliseconds before
    # the driver marks the last component started)
    first_step = re.search(r"first training step ([\d.]+) s after launch", first.stdout)
    assert first_step and float(first_step.group(1)) > sum(phases[:3]), first.stdout[-2000:]
    steps_first = int(rows(os.path.join(train_dir, "r", "metrics.csv"))[-1]["env_steps"])
    assert steps_first >= 50_000
    again = run(["train", "--train-dir", train_dir, "--experiment", "r", "--train-for-env-steps", "100000"])
    assert again.returncode == 2 and "--resume" in again.stderr  # nothing is overwritten
    second = run(["train", "--train-dir", train_dir, "--experiment", "r", "--resume", "--train-for-env-steps",
                  "100000", "--dashboard-address", ""])
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    table = rows(os.path.join(train_dir, "r", "metrics.csv"))
    assert int(table[-1]["env_steps"]) >= 100_000
    appended = [r for r in table if int(r["env_steps"]) > steps_first]
    assert appended and float(appended[0]["time_s"]) >= float(table[0]["time_s"])  # counters go on
    enjoy = run(["enjoy", "--train-dir", train_dir, "--experiment", "r", "--episodes", "5"], timeout=120)
    assert enjoy.returncode == 0, enjoy.stderr
    assert "daskrl enjoy: 5 episodes, return" in enjoy.stdout
    trained = int(re.search(r"policy trained for ([\d,]+) env steps", enjoy.stdout).group(1).replace(",", ""))
    assert trained >= 100_000  # the resumed run's final checkpoint


@pytest.mark.parametrize("missing", ["enjoy", "report"])
def test_missing_experiment_is_a_clear_error(tmp_path, missing):
    out = run([missing, "--train-dir", str(tmp_path), "--experiment", "nope"], timeout=60)
    assert out.returncode == 2
    assert "nope" in out.stderr and "Traceback" not in out.stderr


@slow("a CLI sampling run")
def test_sample_says_when_samplers_ran_in_bfloat16(tmp_path):
    out = run(["sample", "--env", "daskrl/Catch-v0", "--inference-precision", "bfloat16", "--num-envs-per-worker", "4",
               "--train-for-seconds", "3", "--train-dir", str(tmp_path), "--dashboard-address", ""])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "daskrl: rollout_0, rollout_1 ran the policy's encoder in bfloat16 (--inference-precision float32 keeps it" \
        in out.stdout, out.stdout[-2000:]


@slow("a CLI run trained to a return")
def test_serial_mode_solves_cartpole_in_one_process(tmp_path):
    """--serial: every component runs in the driver process (worker threads), so pdb can step through a slot.
    The only other process in the tree is the reaper, a bare interpreter that removes the run's shared memory if
    the driver is killed; no Dask worker, nanny or forkserver."""
    import psutil

    proc = subprocess.Popen(DASKRL + ["train", "--env", "CartPole-v1", "--serial", "--stop-at-return", "475",
                                      "--train-for-seconds", "120", "--train-dir", str(tmp_path), "--experiment",
                                      "serial", "--dashboard-address", ""],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    others: dict[int, str] = {}
    polls_seen: dict[int, int] = {}
    while proc.poll() is None:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                # a child caught between fork and exec shows no command line, or the driver's: keep the one seen later
                others[child.pid] = " ".join(child.cmdline()) or others.get(child.pid, "")
                polls_seen[child.pid] = polls_seen.get(child.pid, 0) + 1
        except psutil.Error:  # exiting
            pass
        time.sleep(0.05)
    out = proc.stdout.read()
    proc.stdout.close()
    assert proc.returncode == 0, out
    assert "(in this process: --serial)" in out and "reached --stop-at-return 475" in out, out
    # Dask workers, nannies and forkservers are Python interpreters; the short-lived commands libraries run from a
    # process (platform's `uname -p`, ctypes' `ldconfig -p`) are not. A fork that stays a copy of the driver (the
    # fork start method) is one too, told from a fork about to exec a command by being seen in more than one poll.
    driver = " ".join(DASKRL)

    def interpreter(pid: int, cmd: str) -> bool:
        if not cmd or cmd.startswith(driver):
            return polls_seen[pid] > 1
        return os.path.basename(cmd.split()[0]).startswith("python")

    interpreters = {pid: cmd for pid, cmd in others.items() if interpreter(pid, cmd)}
    reapers = [cmd for cmd in interpreters.values() if f"reaper.py {proc.pid} " in cmd]
    assert len(reapers) == 1 and len(interpreters) == 1, f"processes besides the reaper: {interpreters}"
    assert float(rows(str(tmp_path / "serial" / "metrics.csv"))[-1]["episode_return_mean"]) >= 475
