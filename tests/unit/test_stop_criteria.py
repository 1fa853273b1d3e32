"""The reports judge a policy by a full window of episodes (``--stop-window``, 100 by default): the progress line
(daskrl/monitor/console.py) says when a mean covers fewer episodes than the window, since the first episodes to end
are often the short ones."""

from __future__ import annotations

from daskrl.monitor.console import progress_line


def test_the_progress_line_says_when_a_mean_covers_fewer_episodes_than_the_window():
    row = {"time_s": 2.0, "env_steps": 1000, "fps": 500.0, "episode_return_mean": 54.0, "episode_return_std": 3.0,
           "episodes": 12, "episodes_in_mean": 12, "policy_version": 3}
    assert "return 54.0±3.0 (12 of 100 ep)" in progress_line(row, window=100)
    assert "(4365 ep)" in progress_line({**row, "episodes": 4365, "episodes_in_mean": 100}, window=100)
