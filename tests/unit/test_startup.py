"""Start-up, with nothing started: the start-up clock (daskrl/driver/launch/startup.py), its phases in order from the
run's launch and its first training step; which command lines start the embedded cluster (daskrl/__main__.py); the
model registry's built-in names; and the private forkserver parts the worker server stops."""

from __future__ import annotations

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


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown start-up phase"):
        StartupClock().mark("coffee")


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


def test_the_private_forkserver_parts_the_worker_server_stops_exist_in_this_python():
    """worker_server.stop relies on multiprocessing's private forkserver handle; a Python that renames it fails
    here, by name, not as a server that outlives every refused command."""
    from multiprocessing import forkserver

    from daskrl.runtime.workers import worker_server

    pid = worker_server.forkserver_pid()
    assert pid is None or isinstance(pid, int)
    assert callable(forkserver._forkserver._stop)  # what end_forkserver calls
