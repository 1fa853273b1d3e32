"""Bad input, as a new user types it: every option given every kind of wrong value, an unreachable or mismatched
cluster, an env that only fails on the workers. Each ends in a few readable lines and a nonzero exit, within
seconds, with no traceback on the terminal, no process and no shared-memory segment left; the full story goes to
the run's log file. And a normal run, or one that recovers from a fault, prints nothing of Dask's own logging."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import typing

import psutil
import pytest

from daskrl.cli import main
from daskrl.config import SECTIONS
from daskrl.errors import ClusterAccessError
from daskrl.runtime.access.cluster import connect_cluster
from daskrl.runtime.memory.shm import list_segments, owner_pid, pid_alive

from ..helpers import Processes, dask_command, free_port, run_watching_children, slow, wait_for_cluster

DASKRL = [sys.executable, "-m", "daskrl"]
DASK_LOG_LINE = (" - WARNING - ", " - ERROR - ", " - INFO - ", "distributed.", "Traceback")


def children() -> set[int]:
    """Live descendants of this process, less multiprocessing's long-lived helpers (the forkserver embedded workers
    are forked from, and its resource tracker), which live as long as this process does."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and not any(h in " ".join(p.cmdline())
                                                               for h in ("forkserver", "resource_tracker")):
                out.add(p.pid)
        except psutil.Error:
            pass
    return out


def new_segments_of_ours(before: set[str]) -> list[str]:
    """daskrl segments made since ``before`` by this process, a child of it, or a process that has exited: not those of
    other test runs on the same machine, whose owners are alive and not ours."""
    ours = children() | {os.getpid()}
    return [name for name in set(list_segments()) - before
            if owner_pid(name) in ours or not pid_alive(owner_pid(name) or 0)]


def run_cli(args: list[str], timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    out = subprocess.run(DASKRL + args, capture_output=True, text=True, timeout=timeout)
    return out, time.monotonic() - t0


# ---- invalid values for every option ----


def invalid_values(f: dataclasses.Field, hint: typing.Any) -> list[str]:
    """Values the CLI must refuse for option ``f``, from its type and its metadata."""
    meta = f.metadata
    optional = type(None) in typing.get_args(hint)
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if optional else hint
    if base is bool:
        return ["=yes"]  # a switch takes no value
    if meta.get("choices"):
        return ["not-a-choice"]
    if base is dict:
        return ["{bad", "[1, 2]"]
    if typing.get_origin(base) is list:
        if typing.get_args(base)[0] is str:
            return ["''"]  # an empty name
        return ["x", "0"] if meta.get("low") == 1 else ["x"]
    if base in (int, float):
        values = ["x", "nan", "inf"] if base is float else ["x", "1.5", "nan"]
        low, high = meta.get("low"), meta.get("high")
        if low is not None:
            values.append(str(low - 1 if base is int else low - 0.5))
            if meta.get("low_open"):
                values.append(str(low))
        if high is not None:
            values.append(str(high * 10 + 1 if base is int else high * 10 + 1.0))
        return values
    if set(typing.get_args(base)) == {int, str}:  # a number or a word ('auto'): neither a word it knows nor a count
        return ["many", "1.5", "0", str(meta["high"] + 1)]
    if base is str:  # text: what its metadata forbids, or a file that is not there
        if f.name.startswith("tls_"):
            return ["/nonexistent/file.pem"]
        if f.name == "action_mask_key":
            return ["action_mask"]  # CartPole's observations are no Dict: nothing to mask with
        if f.name == "encoder":
            return ["no-such-encoder", "cnn"]  # unknown; an image encoder for CartPole's 4 numbers
        if f.name.startswith("wandb_") and f.name != "wandb_project":
            return ["some-name"]  # it describes a W&B run, and without --wandb-project there is none
        if f.name == "frozen_opponent":
            return ["/nonexistent/checkpoint.pt"]  # no such checkpoint (a real one on CartPole: one agent only)
        if f.name == "rnn":
            return ["''", "no-such-core"]  # names are looked up in the registry of cores (register_core)
        return (["''"] if meta.get("low") else []) + (["'not an address'"] if meta.get("pattern") else [])
    raise AssertionError(f"no invalid values known for {f.name}: {hint}")


FREE_TEXT = {"experiment"}  # any name is a valid experiment name
CASES = [(f.name, value) for cls in SECTIONS.values() for f in dataclasses.fields(cls) if f.name not in FREE_TEXT
         for value in invalid_values(f, typing.get_type_hints(cls)[f.name])]


def test_every_option_has_invalid_values_to_try():
    covered = {name for name, _ in CASES}
    every = {f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)} - FREE_TEXT
    assert covered == every, f"options without a bad value to try: {sorted(every - covered)}"
    assert len(CASES) > 100


@pytest.mark.parametrize(("name", "value"), CASES, ids=[f"{n}={v}" for n, v in CASES])
def test_an_invalid_value_is_refused_in_a_few_lines(name, value, tmp_path, capsys):
    flag = "--" + name.replace("_", "-")
    text = value.strip("'")
    argv = ["train", "--train-dir", str(tmp_path), "--experiment", "fuzz", "--dashboard-address", "",
            "--train-for-seconds", "5"]
    argv += [flag + text] if value.startswith("=") else [flag, text]
    before, segments = children(), set(list_segments())
    t0 = time.monotonic()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses it
        code = exc.code
    took = time.monotonic() - t0
    out = capsys.readouterr()
    text_out = out.out + out.err
    assert code not in (0, None), f"{flag} {value} was accepted: {text_out}"
    assert took < 10, f"{flag} {value} took {took:.1f} s to refuse"
    assert len(text_out.strip().splitlines()) <= 8, text_out
    assert "Traceback" not in text_out, text_out
    assert flag in text_out or name in text_out, f"the message does not name the option: {text_out}"
    deadline = time.monotonic() + 10  # a refused run's cluster workers exit as it closes
    while not children() <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert children() <= before, "a process was left"
    assert not new_segments_of_ours(segments), "a shared-memory segment was left"


def test_parser_errors_are_one_line_with_a_pointer_to_help(tmp_path):
    for args in (["--env-kwargs", "{bad"], ["--hidden-sizes", "64", "x"], ["--no-such-option", "1"]):
        out, took = run_cli(["train", "--train-dir", str(tmp_path), *args], timeout=60)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "see daskrl train --help" in out.stderr and "usage:" not in out.stderr, out.stderr
        assert took < 10


@slow("CLI processes")
def test_nan_and_oversized_configurations_are_refused_before_any_process_starts(tmp_path):
    for args, expected in ((["--learning-rate", "nan"], "--learning-rate must be a finite number"),
                           (["--num-envs-per-worker", "100000000"], "--num-envs-per-worker must be within"),
                           # Catch's 84x84 frames: 60,000 envs x 33 steps x 3 slots are about 41 GiB of slots
                           (["--env", "daskrl/Catch-v0", "--num-envs-per-worker", "60000"], "MiB")):
        # daskrl.cli, whose checks these are: the `daskrl` command starts the worker server before it reads the
        # options (daskrl/__main__.py) and ends it on the way out
        code, err, started = run_watching_children([sys.executable, "-m", "daskrl.cli", "train", "--train-dir",
                                                    str(tmp_path), "--dashboard-address", "", *args])
        assert code == 2 and expected in err and "Traceback" not in err, err
        assert not started, f"{args} started processes before it was refused: {started}"
        assert len(err.strip().splitlines()) <= 4, err
    assert not any(tmp_path.iterdir()), "a refused run wrote something"


# ---- clusters ----


@slow("waits out the connect timeout")
def test_an_unreachable_scheduler_fails_within_the_connect_timeout(tmp_path):
    """With a connect timeout shorter than the default 10 s, so the test shows that the option is what ends the wait
    (and waits 3 s rather than 10)."""
    out, took = run_cli(["train", "--scheduler", f"tcp://127.0.0.1:{free_port()}", "--train-dir", str(tmp_path),
                         "--connect-timeout", "3"], timeout=60)
    print(f"\nunreachable scheduler refused in {took:.1f} s: {out.stderr.strip()}")
    assert out.returncode == 2, out.stdout + out.stderr
    assert 3 <= took < 3 + 6, took  # the timeout, and the command's own start-up
    err = out.stderr.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert "cannot use the Dask scheduler at tcp://127.0.0.1:" in err and "--connect-timeout" in err, err


def test_a_wrong_protocol_is_refused_at_once(tmp_path):
    out, took = run_cli(["train", "--scheduler", "http://127.0.0.1:8786", "--train-dir", str(tmp_path)], timeout=60)
    assert out.returncode == 2 and "--scheduler must be an address" in out.stderr and took < 10, out.stderr
    with pytest.raises(ClusterAccessError, match="Dask does not speak 'http'"):
        connect_cluster("http://127.0.0.1:8786", timeout=5)


def test_a_worker_with_another_daskrl_version_is_refused_at_connect(tmp_path):
    """A real `dask worker` whose environment holds another daskrl (its package metadata says 9.9.9)."""
    other = tmp_path / "other_env"
    dist = other / "daskrl-9.9.9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: daskrl\nVersion: 9.9.9\n")
    procs = Processes(tmp_path)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    try:
        procs.start("scheduler", dask_command(), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                    "--no-dashboard")
        procs.start("worker", dask_command(), "worker", address, "--nworkers", "1", "--nthreads", "1",
                    "--no-dashboard", env={"PYTHONPATH": str(other)})
        wait_for_cluster(address, 1, procs).close()
        t0 = time.monotonic()
        with pytest.raises(ClusterAccessError) as info:
            connect_cluster(address, timeout=10)
        message = str(info.value)
        print(f"\nversion mismatch refused in {time.monotonic() - t0:.1f} s: {message}")
        assert "daskrl 0.1.0 here, 9.9.9 on worker tcp://127.0.0.1:" in message, message
        assert "Install the same versions" in message and "\n" not in message
    finally:
        assert procs.stop() == []


# ---- failures during a run ----


@slow("a CLI run on a cluster")
def test_an_env_that_fails_only_on_the_workers_stops_the_run_in_a_few_lines(tmp_path):
    out, took = run_cli(["train", "--env", "daskrl.testing.faults:broken_on_workers", "--train-dir", str(tmp_path),
                         "--experiment", "broken", "--dashboard-address", "", "--num-workers", "1"], timeout=120)
    err = out.stderr.strip()
    assert out.returncode == 1, out.stdout + out.stderr
    assert len(err.splitlines()) <= 3 and "Traceback" not in err, err
    assert "rollout_0" in err and "MissingResourceError" in err and "data files are not installed" in err, err
    log = tmp_path / "broken" / "daskrl.log"
    assert f"the full log, with tracebacks, is in {log}" in err
    assert "Traceback" in log.read_text(), "the log file holds the full traceback"
    assert not any(line.startswith(DASK_LOG_LINE) or any(m in line for m in DASK_LOG_LINE)
                   for line in out.stdout.splitlines()), out.stdout


UNGUARDED_SCRIPT = """
import daskrl
from daskrl.config import Config

daskrl.train(Config.from_flat({"env": "CartPole-v1", "train_for_env_steps": 5000, "train_dir": %r,
                               "dashboard_address": ""}))
"""


def test_a_script_that_starts_a_run_at_its_top_level_is_told_to_guard_it_in_one_line(tmp_path):
    """Every embedded worker process imports the user's script again (multiprocessing's forkserver and spawn), so
    a run started at the script's top level started again in each worker: a page of tracebacks from multiprocessing
    and Dask. Now the workers end at once and the script's error names the fix; nothing is left behind."""
    script = tmp_path / "train_at_top_level.py"
    script.write_text(UNGUARDED_SCRIPT % str(tmp_path / "runs"))
    before = set(list_segments())
    code, err, started = run_watching_children([sys.executable, str(script)])
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("daskrl.errors.ClusterAccessError: the embedded cluster's worker processes did not start")
    assert f'if {script} starts the run at its top level, start it under `if __name__ == "__main__":`' in last, last
    assert "An attempt has been made to start a new process" not in err and len(err.splitlines()) < 60, err
    deadline = time.monotonic() + 15
    while any(pid_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in started if pid_alive(pid)], "a process of the failed start outlived the script"
    assert not new_segments_of_ours(before)


def test_a_worker_process_importing_the_script_ends_in_one_line_before_it_starts_anything(tmp_path):
    script = tmp_path / "imported_again.py"
    script.write_text("import multiprocessing\n"
                      "from daskrl.runtime.workers.worker_server import refuse_a_run_while_a_worker_imports_the_script\n"
                      "refuse_a_run_while_a_worker_imports_the_script()  # nothing in the script's own process\n"
                      "def nothing():\n    pass\n"
                      "if __name__ == '__main__':\n"
                      "    child = multiprocessing.get_context('spawn').Process(target=nothing)\n"
                      "    child.start()\n    child.join()\n    print('child exit', child.exitcode)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "child exit 1", out.stdout + out.stderr
    assert out.stderr.strip() == (f"daskrl: a worker process imported {script} again, and it starts a run there: "
                                  'start it under `if __name__ == "__main__":` (every worker process imports the '
                                  "script again)"), out.stderr


@slow("two CLI runs, one with a SIGKILL drill")
def test_a_normal_run_and_a_recovered_fault_print_nothing_of_daskrls_or_dasks_logging(tmp_path):
    """README's first command as a new user runs it, with a worker process SIGKILLed half way."""
    proc = subprocess.Popen(DASKRL + ["train", "--env", "CartPole-v1", "--train-dir", str(tmp_path), "--experiment",
                                      "quiet", "--train-for-seconds", "14", "--train-for-env-steps", "0",
                                      "--dashboard-address", ""],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    killed = None
    try:
        deadline = time.monotonic() + 60
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            if (tmp_path / "quiet" / "metrics.csv").exists():
                time.sleep(2.0)
                servers = [p for p in psutil.Process(proc.pid).children() if "forkserver" in " ".join(p.cmdline())]
                workers = [w for s in servers for w in s.children() if "forkserver" in " ".join(w.cmdline())]
                if workers:  # forked from the forkserver (so named like it): the Dask workers of the components
                    killed = workers[0].pid
                    os.kill(killed, signal.SIGKILL)
            time.sleep(0.1)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert killed, "no worker process was found to kill"
    assert proc.returncode == 0, out + err
    assert "daskrl: lost" in out and "daskrl: recovered" in out, out
    noisy = [line for line in (out + err).splitlines() if any(m in line for m in DASK_LOG_LINE)]
    assert not noisy, f"log lines on the terminal: {noisy}"
    log = (tmp_path / "quiet" / "daskrl.log").read_text()
    assert "distributed" in log, "Dask's lines went to the run's log file"
