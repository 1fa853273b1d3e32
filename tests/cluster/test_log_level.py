"""--log-level in two short CartPole runs through daskrl.train, each on its own embedded cluster, read from the
process's own stdout and stderr: warning hides the info lines and the progress (the run's log keeps them), and
debug shows them with the driver's records of daskrl's and Dask's loggers (daskrl/runtime/logs.py)."""

from __future__ import annotations

import logging

import pytest

from daskrl.monitor.console import shown_level

from ..helpers import SMALL_CARTPOLE, run_config, slow


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
