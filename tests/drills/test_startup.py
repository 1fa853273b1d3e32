"""Start-up as a process sees it, each test in a fresh Python interpreter: a process's launch is read to a clock tick
(daskrl/driver/launch/startup.py), the command line checks a run without importing torch, a run's driver never
imports torch and its checkpoints load, and ``daskrl train`` starts the worker server before its imports and stops
it when the run never starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the launch from /proc (Linux)")
def test_a_process_launch_is_read_to_a_clock_tick():
    """A child launched now says it started now, to a clock tick (10 ms) and its fork: not up to a second early, as
    when the boot's time came from /proc/stat's whole-second ``btime``."""
    code = "from daskrl.driver.launch.startup import process_started_at; print(repr(process_started_at()))"
    before = time.time()
    started = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert before - 0.02 <= started <= before + 0.25, started - before


def test_the_command_line_checks_a_run_without_importing_torch(tmp_path):
    """torch is imported while the cluster starts (daskrl/driver/launch/start.py), not before: the command line, the
    checks and the model registry's names need none of it (about a second of start-up on two cores); a recurrent
    model's checks do (its cell says how much state a slot holds). Nor does a run that logs to W&B need wandb
    before its cluster starts (checking it is installed imports nothing)."""
    code = ("import importlib.util, sys; import daskrl.cli; from daskrl.config import Config; from "
            "daskrl.driver.launch.preflight import preflight; from daskrl.models.registry import names; "
            f"preflight(Config.from_flat({{'env': 'CartPole-v1', 'train_dir': {str(tmp_path)!r}}})); "
            f"wandb = {{'wandb_project': 'p'}} if importlib.util.find_spec('wandb') else {{}}; "
            f"preflight(Config.from_flat({{'env': 'CartPole-v1', 'train_dir': {str(tmp_path)!r}, **wandb}})); "
            "print(names('core'), 'torch' in sys.modules, 'wandb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['gru', 'lstm', 'none'] False False"


def test_a_runs_driver_never_imports_torch_and_its_checkpoints_load(tmp_path):
    """A CartPole run from Python, on the embedded cluster, with checkpoints: the driver process holds the
    components' classes, writes the event files and the checkpoints the learner serialized, and checks the model on a
    worker, without importing torch (116 MB of private memory and 0.7 s of CPU); the checkpoint it wrote carries the
    learner's state and the driver's metadata."""
    code = ("import sys, json; from daskrl import train, Config; "
            f"s = train(Config.from_flat({{'env': 'CartPole-v1', 'train_for_env_steps': 40000, 'train_dir': "
            f"{str(tmp_path)!r}, 'experiment': 'no_torch', 'dashboard_address': '', 'checkpoint_interval': 1}})); "
            "print(json.dumps(['torch' in sys.modules, s['env_steps']]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    torch_imported, env_steps = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert not torch_imported, "the driver imported torch"
    import torch

    from daskrl.learning.checkpoints import CheckpointStore

    state = CheckpointStore(tmp_path / "no_torch" / "checkpoints").load("latest")
    assert state["env_steps"] == env_steps and state["policy"] == 0 and "config" in state
    assert isinstance(state["model"]["critic.weight"], torch.Tensor) and state["policy_version"] > 0
    events = list((tmp_path / "no_torch" / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 1000, "no TensorBoard scalars were written"


def _forkservers_marked(mark: str) -> set[int]:
    """The forkservers started by a command run with ``DASKRL_TEST_MARK=mark`` (they inherit its environment): other
    tests' servers, such as an xdist neighbour's, do not count."""
    import psutil

    found = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if "multiprocessing.forkserver" not in " ".join(proc.info["cmdline"] or []):
            continue
        try:
            if proc.environ().get("DASKRL_TEST_MARK") == mark:
                found.add(proc.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_the_command_starts_the_worker_server_before_its_imports_and_stops_it_when_the_run_never_starts(tmp_path):
    """``daskrl train`` (daskrl/__main__.py) starts the embedded cluster's worker server before it imports the command
    line's modules; a run refused by its checks ends at once and leaves no server behind (one still importing torch
    would outlive the command by a second otherwise)."""
    code = ("import sys; from daskrl.runtime.workers import worker_server; real = worker_server.start; seen = []\n"
            "def start():\n    seen.append('daskrl.cli' in sys.modules); real()\n"
            "worker_server.start = start\nfrom daskrl.__main__ import main\n"
            f"sys.argv = ['daskrl', 'train', '--env', 'Nope-v0', '--train-dir', {str(tmp_path)!r}]\n"
            "rc = main(); print(seen, rc, worker_server._starting is None)")
    mark = uuid.uuid4().hex
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DASKRL_TEST_MARK": mark})
    assert out.stdout.strip().splitlines()[-1] == "[False] 2 True", (out.stdout, out.stderr)
    assert "Unknown environment 'Nope-v0'" in out.stderr
    time.sleep(0.2)
    assert _forkservers_marked(mark) == set(), "the worker server outlived the command"
