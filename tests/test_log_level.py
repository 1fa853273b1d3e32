"""--log-level: which of a run's own lines the console shows (daskrl/monitor/console.py), and at debug the driver's
records of daskrl's and Dask's loggers too (daskrl/runtime/logs.py): the level rule alone, then two short real runs
read from the process's own stdout and stderr."""

from __future__ import annotations

import logging

import pytest

from daskrl.monitor.console import console_level, say, shown_level, warn

from .helpers import SMALL_CARTPOLE, run_config, slow


def test_the_console_shows_the_lines_of_the_level_asked_and_up(capsys):
    with console_level("warning"):
        say("daskrl: an info line")
        warn("a warning line")
        with console_level("debug"):  # two live runs of one process: the more talkative one's level holds
            say("daskrl: shown while a debug run lives")
        say("daskrl: hidden again")
    say("daskrl: the default shows info")
    with console_level("error"):
        warn("hidden at error")
    assert capsys.readouterr().out.splitlines() == [
        "daskrl: warning: a warning line", "daskrl: shown while a debug run lives", "daskrl: the default shows info"]
    assert shown_level() == logging.INFO


def short_run(tmp_path, capfd, level: str) -> tuple[str, str]:
    """A 2,000-step CartPole run on its own embedded cluster at ``level``: (stdout, stderr), as a terminal gets
    them (the worker processes' included)."""
    from daskrl import train

    capfd.readouterr()
    summary = train(run_config(tmp_path, level, base=SMALL_CARTPOLE, train_for_env_steps=2_000, log_level=level))
    assert summary["env_steps"] >= 2_000
    return capfd.readouterr()


@slow("a short training run on an embedded cluster")
def test_warning_hides_the_info_lines_and_the_progress(tmp_path, capfd):
    out, err = short_run(tmp_path, capfd, "warning")
    assert [line for line in out.splitlines() if not line.startswith("daskrl: warning:")] == [], out
    assert " INFO" not in err, err
    log = (tmp_path / "warning" / "daskrl.log").read_text()
    assert " INFO: " in log  # what the console left out is still in the run's log


@slow("a short training run on an embedded cluster")
def test_debug_shows_the_info_lines_and_the_records_of_the_loggers(tmp_path, capfd):
    out, err = short_run(tmp_path, capfd, "debug")
    assert "daskrl: experiment " in out and "daskrl: stopping: reached" in out and "] env steps" in out, out
    assert "distributed.scheduler INFO: Register worker" in err, err  # the embedded scheduler's, in this process
    assert "distributed.scheduler INFO: Register worker" in (tmp_path / "debug" / "daskrl.log").read_text()


@pytest.fixture(autouse=True)
def _default_level_after():
    yield
    assert shown_level() == logging.INFO, "a run left the console at another level"
