"""The start-up clock (daskrl/driver/launch/startup.py): phases in order from the run's launch, the first training step."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from daskrl.__main__ import runs_embedded_cluster
from daskrl.driver.launch import startup
from daskrl.driver.launch.startup import PHASES, StartupClock, process_started_at


def test_phases_are_the_seconds_between_marks_in_order_and_add_up_to_ready():
    clock = StartupClock()
    for phase in PHASES:
        time.sleep(0.02)
        clock.mark(phase)
    phases = clock.phases()
    assert list(phases) == list(PHASES)
    assert all(seconds >= 0.01 for seconds in phases.values())
    assert abs(sum(phases.values()) - clock.ready_s()) < 0.03
    assert clock.line().startswith(f"started in {clock.ready_s():.2f} s (imports ")


def test_the_first_step_is_the_first_version_newer_than_the_one_the_run_started_with():
    clock = StartupClock()
    clock.saw_version(7)  # a resumed run starts at version 7
    clock.saw_version(7)
    assert clock.first_step_s is None
    clock.saw_version(8)
    first = clock.first_step_s
    assert first is not None and first >= 0
    clock.saw_version(9)
    assert clock.first_step_s == first


def test_the_first_step_is_when_the_learner_says_it_ended_not_when_the_runner_polled():
    clock = StartupClock()
    clock.started = time.time() - 2.0
    clock.saw_version(1)
    clock.saw_version(2, trained_at=clock.started + 1.25)  # the learner's own wall clock, seen a poll later
    assert clock.first_step_s == 1.25
    late = StartupClock()
    late.started = time.time() - 2.0
    late.saw_version(1)
    late.saw_version(2, trained_at=late.started - 5.0)  # a clock that cannot be right (another host's): now instead
    assert late.first_step_s is not None and 1.9 <= late.first_step_s <= 2.5


def test_a_run_from_the_command_line_counts_from_the_process_launch(monkeypatch):
    monkeypatch.setattr(startup, "_counted_from", [])
    assert time.time() - StartupClock().started < 1  # from Python: from launch
    startup.count_from_process_start()
    assert StartupClock().started == pytest.approx(process_started_at(), abs=0.02)
    assert time.time() - process_started_at() > 0.1  # this test process started well before now
    # only that run: a later one from Python (in a test process that ran the CLI, in a notebook) counts from launch
    assert time.time() - StartupClock().started < 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the launch from /proc (Linux)")
def test_a_process_launch_is_read_to_a_clock_tick():
    """A child launched now says it started now, to a clock tick (10 ms) and its fork: not up to a second early, as
    when the boot's time came from /proc/stat's whole-second ``btime``."""
    code = "from daskrl.driver.launch.startup import process_started_at; print(repr(process_started_at()))"
    before = time.time()
    started = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert before - 0.02 <= started <= before + 0.25, started - before


def _inherited_state() -> tuple[bool, int, int]:  # the collector, its frozen objects, version-cache hits
    import gc

    from distributed.versions import _version_cached

    return gc.isenabled(), gc.get_freeze_count(), _version_cached.cache_info().hits


def test_workers_forked_from_the_server_collect_garbage_and_inherit_its_imports_frozen_and_caches_filled(session):
    """The server pauses the garbage collector for its imports (daskrl/runtime/workers/preload_start.py: 0.15-0.2 s of
    start-up) and resumes it after freezing them (preload_done.py): a worker that inherited it paused would never
    free a reference cycle. Dask's package versions, which each worker reports as it registers, were cached in the
    server: the registration found them there (without: 9 misses, no hit)."""
    states = session.client.run(_inherited_state)
    assert len(states) == 2
    for enabled, frozen, versions in states.values():
        assert enabled and frozen > 100_000, states  # torch's, distributed's and daskrl's objects: about 300,000
        assert versions > 0, states  # hits


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown start-up phase"):
        StartupClock().mark("coffee")


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


def test_the_built_in_names_the_registry_lists_are_the_ones_their_modules_register():
    import importlib

    from daskrl.models import registry

    for kind, (module, listed) in registry.BUILTIN.items():
        importlib.import_module(module)
        assert set(listed) <= set(registry._TABLES[kind]), (kind, listed)
        assert all(registry.lookup(kind, name) is registry._TABLES[kind][name] for name in listed)


def test_the_command_guesses_from_its_arguments_which_runs_start_the_embedded_cluster():
    assert runs_embedded_cluster(["train", "--env", "CartPole-v1"])
    assert runs_embedded_cluster(["sample", "--env=CartPole-v1"])
    assert not runs_embedded_cluster(["train", "--scheduler", "tcp://h:8786"])
    assert not runs_embedded_cluster(["train", "--scheduler=tcp://h:8786"])
    assert not runs_embedded_cluster(["train", "--serial"])
    assert not runs_embedded_cluster(["train", "--help"])
    assert not runs_embedded_cluster(["enjoy", "--experiment", "x"])
    assert not runs_embedded_cluster([])


def _forkservers() -> set[int]:
    import psutil

    found = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if "multiprocessing.forkserver" in " ".join(proc.info["cmdline"] or []):
            found.add(proc.info["pid"])
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
    before = _forkservers()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[False] 2 True", (out.stdout, out.stderr)
    assert "Unknown environment 'Nope-v0'" in out.stderr
    time.sleep(0.2)
    assert _forkservers() - before == set(), "the worker server outlived the command"


def test_the_private_forkserver_parts_the_worker_server_stops_exist_in_this_python():
    """worker_server.stop relies on multiprocessing's private forkserver handle; a Python that renames it fails
    here, by name, not as a server that outlives every refused command."""
    from multiprocessing import forkserver

    from daskrl.runtime.workers import worker_server

    pid = worker_server.forkserver_pid()
    assert pid is None or isinstance(pid, int)
    assert callable(forkserver._forkserver._stop)  # what end_forkserver calls
