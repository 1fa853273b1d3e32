"""--log-level's rule alone: which of a run's own lines the console shows (daskrl/monitor/console.py) at the level
asked, and with two live runs in one process the more talkative one's level holds."""

from __future__ import annotations

import logging

import pytest

from daskrl.monitor.console import console_level, say, shown_level, warn


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


@pytest.fixture(autouse=True)
def _default_level_after():
    yield
    assert shown_level() == logging.INFO, "a run left the console at another level"
