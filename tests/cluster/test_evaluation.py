"""Evaluation while training (--eval-interval-env-steps), videos (enjoy --video, --save-video-every-env-steps) and
the report that embeds them, on real CartPole runs through daskrl.train on its embedded cluster; and a run whose
every video fails warns once and goes on training and evaluating."""

from __future__ import annotations

import csv
import math
import re
from typing import NamedTuple

import pytest

from daskrl.cli import main
from daskrl.config import Config

from ..helpers import slow

EVERY = 50_000  # env steps between evaluations


VIDEO_EVERY = 100_000


def frame_count(path) -> int:
    import imageio.v2 as imageio

    with imageio.get_reader(str(path), format="FFMPEG") as reader:
        return sum(1 for _ in reader)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A CartPole run that evaluates every 50k env steps and records a video every 100k, trained to about solving
    (800k steps, 12-18 s on the 2-core machines: a video of a good policy takes seconds to render and encode, the
    multiples passed meanwhile are skipped, and a second video needs the run to go on after the first)."""
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (pip install 'daskrl[video]')")
    pytest.importorskip("pygame", reason="CartPole renders with pygame (pip install 'gymnasium[classic-control]')")
    from daskrl import train

    tmp = tmp_path_factory.mktemp("eval")
    config = Config().replace(env="CartPole-v1", train_dir=str(tmp), experiment="ev", dashboard_address="",
                              train_for_env_steps=800_000, report_interval=1.0, eval_interval_env_steps=EVERY,
                              eval_episodes=3, save_video_every_env_steps=VIDEO_EVERY)
    summary = train(config)
    with open(tmp / "ev" / "metrics.csv", newline="") as f:
        rows = [{k: float(v) if v not in ("", "nan") else math.nan for k, v in r.items()} for r in csv.DictReader(f)]
    return {"summary": summary, "rows": rows, "dir": tmp / "ev", "train_dir": tmp}


class Logged(NamedTuple):
    """One evaluation as the run's CSV shows it, in the run's own env steps."""

    taken: float  # its weights were taken here: the first poll past its multiple, or past the end of the one before
    logged: float  # the row that carries its result
    row_before: float  # the row before that one

    @property
    def multiple(self) -> int:
        return int(self.taken // EVERY)

    def may_follow_a_replaced_one(self, before: Logged | None) -> bool:
        """Whether an evaluation the CSV does not show may have run between ``before`` and this one: two results
        between two rows keep the newer one, so this one was taken and logged within one report, and a multiple
        lies between the two for the unseen one."""
        return self.taken >= self.row_before and self.multiple - (before.multiple if before else 0) >= 2


def logged_evaluations(rows: list[dict]) -> list[Logged]:
    return [Logged(r["eval_env_steps"], r["env_steps"], before["env_steps"])
            for before, r in zip([{"env_steps": 0.0}, *rows], rows, strict=False) if not math.isnan(r["eval_env_steps"])]


def why_not_evaluated(k: int, logged: list[Logged]) -> str:
    """How the CSV accounts for multiple ``k`` of the interval ("" where it does not). One evaluation runs at a time,
    so a multiple passed while one ran is skipped: one the CSV logged (it ran from the env steps its weights were
    taken at to the row that logged it, at the latest), one the CSV lost (see ``may_follow_a_replaced_one``), or the
    one still running when the run stopped (its result goes nowhere)."""
    m = k * EVERY
    if any(e.multiple == k for e in logged):
        return "evaluated"
    if any(e.taken < m <= e.logged for e in logged):
        return "passed while a logged evaluation ran"
    after = [i for i, e in enumerate(logged) if e.taken > m]
    if not after:
        return "passed after the last result: while the evaluation the stop abandoned ran"
    i = after[0]
    replaced = logged[i].may_follow_a_replaced_one(logged[i - 1] if i else None)
    return "passed while an evaluation ran whose result the next one replaced" if replaced else ""


@slow("a 1.2M-step run that evaluates and records (trained)")
def test_evaluations_are_logged_at_each_multiple_of_the_interval(trained):
    """Counted in the run's own env steps (its CSV), with no bound on how fast the evaluator is next to training: on
    shared cores it may fall behind, and then skips multiples, by design."""
    rows, summary = trained["rows"], trained["summary"]
    evals = [r for r in rows if not math.isnan(r["eval_return_mean"])]
    assert evals, "no evaluation was logged"
    # a row's step count grows by at most this much between two reports: an evaluation's weights are taken at the
    # first poll after its multiple, or after the end of the evaluation before it (logged at the latest in that
    # one's row) when that one ran past the multiple, so its env steps lie within one report of the later of the two
    per_report = max(b["env_steps"] - a["env_steps"] for a, b in zip(rows, rows[1:], strict=False))
    logged = logged_evaluations(rows)
    multiples = []
    for before, e in zip([None, *logged], logged, strict=False):
        free_from = max(e.multiple * EVERY, before.logged if before else 0.0)
        prompt = e.taken - free_from <= per_report or e.may_follow_a_replaced_one(before)
        assert e.multiple >= 1 and prompt, (e, before, per_report)
        assert e.taken <= e.logged  # logged after its weights were taken, never before
        multiples.append(e.multiple)
    assert multiples == sorted(set(multiples)), multiples  # each multiple once, in order
    # every multiple the run passed was evaluated, or skipped because an evaluation was running then
    passed = int(rows[-1]["env_steps"] // EVERY)
    accounted = {k: why_not_evaluated(k, logged) for k in range(1, passed + 1)}
    assert all(accounted.values()), accounted
    # real episodes: 3 of them, and on CartPole (reward 1 a step) the return is the length
    assert all(r["eval_episodes"] == 3 for r in evals)
    assert all(8 <= r["eval_return_mean"] <= 500 and r["eval_return_mean"] == r["eval_length_mean"] for r in evals)
    # the trained policy, taking its most likely action, balances the pole to the time limit
    assert max(r["eval_return_mean"] for r in evals) >= 450, [r["eval_return_mean"] for r in evals]
    assert summary["incidents"].get("eval-failed", 0) == 0


@slow("a 1.2M-step run that evaluates and records (trained)")
def test_tensorboard_places_evaluations_at_their_weights_env_steps(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(trained["dir"] / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    points = acc.Scalars("eval/return_mean")
    evals = [r for r in trained["rows"] if not math.isnan(r["eval_return_mean"])]
    assert [p.step for p in points] == [int(r["eval_env_steps"]) for r in evals]
    assert [round(p.value, 3) for p in points] == [round(r["eval_return_mean"], 3) for r in evals]


@slow("a 1.2M-step run that evaluates and records (trained)")
def test_videos_while_training_and_the_report_embeds_the_newest(trained, tmp_path):
    from daskrl.monitor.figures.report import latest_video, write_report

    videos = sorted(trained["dir"].glob("videos/*.mp4"))
    steps = sorted(int(re.fullmatch(r"video_(\d+)\.mp4", v.name).group(1)) for v in videos)
    assert len(steps) >= 2 and all(s >= (i + 1) * VIDEO_EVERY for i, s in enumerate(steps)), steps
    newest = trained["dir"] / "videos" / f"video_{steps[-1]}.mp4"
    assert latest_video(str(trained["dir"])) == str(newest)
    assert 8 <= frame_count(newest) <= 500  # one whole CartPole episode
    page = open(write_report(str(trained["dir"]), str(tmp_path / "report.html"))).read()
    assert "<video id='daskrl-video'" in page and "data:video/mp4;base64," in page
    # in the page's HTML, after the plots' scripts (not inside BokehJS's code, where a "</body>" text also is)
    assert page.rindex("</script>") < page.index("<video id='daskrl-video'") < page.rindex("</body>")
    assert f"The policy at {steps[-1]:,} env steps" in page
    last = [r for r in trained["rows"] if not math.isnan(r["eval_return_mean"])][-1]
    assert f"evaluation return {last['eval_return_mean']:.1f} at {last['eval_env_steps']:,.0f} env steps" in page


@slow("a 1.2M-step run (trained), then two videos")
def test_enjoy_video_has_one_frame_per_step_of_the_episodes(trained, tmp_path, capsys):
    from daskrl.evaluation import enjoy

    out = tmp_path / "cartpole.mp4"
    result = enjoy(str(trained["dir"]), episodes=2, deterministic=False, video=str(out), seed=3)
    steps = sum(result["returns"])  # CartPole: the return is the episode's length
    assert result["video_frames"] == steps and frame_count(out) == steps

    assert main(["enjoy", "--train-dir", str(trained["train_dir"]), "--experiment", "ev", "--episodes", "1",
                 "--video", str(tmp_path / "again.mp4")]) == 0
    printed = capsys.readouterr().out
    frames = int(re.search(r"wrote .*again\.mp4 \(([\d,]+) frames\)", printed).group(1).replace(",", ""))
    assert frames == frame_count(tmp_path / "again.mp4") > 0


def test_a_failing_video_is_one_warning_and_training_and_evaluation_go_on(tmp_path, capsys):
    """An env with a known return (1 a step, cut at 20 steps) evaluates to exactly 20; its camera breaks after the
    check before the run, so every video fails: counted, said once, and the run ends as asked."""
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (pip install 'daskrl[video]')")
    from daskrl import train

    config = Config().replace(env="daskrl.testing.environments.envs:broken_camera", train_dir=str(tmp_path),
                              experiment="cam", dashboard_address="", num_workers=1, num_envs_per_worker=8,
                              train_for_env_steps=200_000,
                              report_interval=0.5, eval_interval_env_steps=10_000, eval_episodes=4,
                              save_video_every_env_steps=10_000)
    # 200k steps (a few seconds): 60k took 1.1 s, and under a loaded suite the video thread's second try came after
    # the run's end
    summary = train(config)
    assert summary["stop_reason"].startswith("reached") and summary["env_steps"] >= 200_000, summary["stop_reason"]
    assert summary["incidents"].get("video-failed", 0) >= 2, summary["incidents"]  # each multiple tried again
    out = capsys.readouterr().out
    assert out.count("failed (RuntimeError: camera unplugged); training goes on") == 1, out[-3000:]
    assert not list((tmp_path / "cam").glob("videos/*.mp4"))  # no half-written file either
    with open(tmp_path / "cam" / "metrics.csv", newline="") as f:
        evals = [r for r in csv.DictReader(f) if r["eval_return_mean"] not in ("", "nan")]
    assert evals and all(float(r["eval_return_mean"]) == 20.0 and float(r["eval_episodes"]) == 4 for r in evals)
