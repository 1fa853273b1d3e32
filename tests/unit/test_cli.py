"""The closing line the `daskrl` command prints after a run (daskrl/cli.py), called here without a run: a run in which
no episode ended says so instead of a mean return of nan over 0 episodes."""

from __future__ import annotations


def test_the_closing_line_of_a_run_without_a_finished_episode_says_so(capsys):
    """A short run, or a resume that ends before its first episode, has no mean return: the line says that, not
    'mean return nan over the last 0 episodes'."""
    from daskrl.cli import _print_summary

    summary = {"env_steps": 5_448, "elapsed_s": 15.7, "mean_fps": 131.0, "fps": 77.0, "experiment_dir": "td/x",
               "episode_return_mean": float("nan"), "episodes_in_mean": 0}
    _print_summary(summary, sampling=False)
    assert "; no episode ended; results in td/x" in capsys.readouterr().out
    _print_summary({**summary, "episode_return_mean": -1042.7, "episodes_in_mean": 2}, sampling=False)
    assert "mean return -1042.7 over the last 2 episodes; results in td/x" in capsys.readouterr().out
