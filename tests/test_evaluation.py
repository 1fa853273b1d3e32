"""Evaluation while training (--eval-interval-env-steps), videos (enjoy --video, --save-video-every-env-steps) and
the report that embeds them: on real CartPole runs through daskrl.train."""

from __future__ import annotations

import csv
import math
import re

import pytest

from daskrl.cli import main
from daskrl.config import Config

EVERY = 50_000  # env steps between evaluations
VIDEO_EVERY = 150_000


def frame_count(path) -> int:
    import imageio.v2 as imageio

    with imageio.get_reader(str(path), format="FFMPEG") as reader:
        return sum(1 for _ in reader)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A CartPole run that evaluates every 50k env steps and records a video every 150k, trained past solving (600k
    steps: a video of the solved policy takes seconds to render and encode, and the next waits for it)."""
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (pip install 'daskrl[video]')")
    pytest.importorskip("pygame", reason="CartPole renders with pygame (pip install 'gymnasium[classic-control]')")
    from daskrl import train

    tmp = tmp_path_factory.mktemp("eval")
    config = Config().replace(env="CartPole-v1", train_dir=str(tmp), experiment="ev", dashboard_address="",
                              train_for_env_steps=600_000, report_interval=1.0, eval_interval_env_steps=EVERY,
                              eval_episodes=3, save_video_every_env_steps=VIDEO_EVERY)
    summary = train(config)
    with open(tmp / "ev" / "metrics.csv", newline="") as f:
        rows = [{k: float(v) if v not in ("", "nan") else math.nan for k, v in r.items()} for r in csv.DictReader(f)]
    return {"summary": summary, "rows": rows, "dir": tmp / "ev", "train_dir": tmp}


def test_evaluations_are_logged_at_each_multiple_of_the_interval(trained):
    rows, summary = trained["rows"], trained["summary"]
    evals = [r for r in rows if not math.isnan(r["eval_return_mean"])]
    assert evals, "no evaluation was logged"
    # a row's step count grows by at most this much between two reports: an evaluation's weights are taken at the
    # first poll after its multiple, so its env steps lie within one report of it
    per_report = max(b["env_steps"] - a["env_steps"] for a, b in zip(rows, rows[1:], strict=False))
    multiples = []
    for r in evals:
        k = int(r["eval_env_steps"] // EVERY)
        assert k >= 1 and r["eval_env_steps"] - k * EVERY <= per_report, (r["eval_env_steps"], per_report)
        assert r["eval_env_steps"] <= r["env_steps"]  # logged after its weights were taken, never before
        multiples.append(k)
    assert multiples == sorted(set(multiples)), multiples  # each multiple once, in order
    passed = int(summary["env_steps"] // EVERY)
    # one evaluation at a time: a multiple passed while one ran is skipped, but most are evaluated
    assert len(multiples) >= passed // 2 and max(multiples) >= passed - 2, (multiples, passed)
    # real episodes: 3 of them, and on CartPole (reward 1 a step) the return is the length
    assert all(r["eval_episodes"] == 3 for r in evals)
    assert all(8 <= r["eval_return_mean"] <= 500 and r["eval_return_mean"] == r["eval_length_mean"] for r in evals)
    # the trained policy, taking its most likely action, balances the pole to the time limit
    assert max(r["eval_return_mean"] for r in evals) >= 450, [r["eval_return_mean"] for r in evals]
    assert summary["incidents"].get("eval-failed", 0) == 0


def test_tensorboard_places_evaluations_at_their_weights_env_steps(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(trained["dir"] / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    points = acc.Scalars("eval/return_mean")
    evals = [r for r in trained["rows"] if not math.isnan(r["eval_return_mean"])]
    assert [p.step for p in points] == [int(r["eval_env_steps"]) for r in evals]
    assert [round(p.value, 3) for p in points] == [round(r["eval_return_mean"], 3) for r in evals]


def test_videos_while_training_and_the_report_embeds_the_newest(trained, tmp_path):
    from daskrl.monitor.report import latest_video, write_report

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


def test_an_env_that_cannot_render_frames_is_one_readable_error(tmp_path, capsys):
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (pip install 'daskrl[video]')")
    code = main(["train", "--env", "daskrl/Counting-v0", "--save-video-every-env-steps", "1000",
                 "--train-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "daskrl/Counting-v0" in err and "cannot render rgb_array frames" in err, err
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_a_failing_video_is_one_warning_and_training_and_evaluation_go_on(tmp_path, capsys):
    """An env with a known return (1 a step, cut at 20 steps) evaluates to exactly 20; its camera breaks after the
    check before the run, so every video fails: counted, said once, and the run ends as asked."""
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (pip install 'daskrl[video]')")
    from daskrl import train

    config = Config().replace(env="daskrl.testing.envs:broken_camera", train_dir=str(tmp_path), experiment="cam",
                              dashboard_address="", num_workers=1, num_envs_per_worker=8, train_for_env_steps=60_000,
                              report_interval=0.5, eval_interval_env_steps=10_000, eval_episodes=4,
                              save_video_every_env_steps=10_000)
    summary = train(config)
    assert summary["stop_reason"].startswith("reached") and summary["env_steps"] >= 60_000, summary["stop_reason"]
    assert summary["incidents"].get("video-failed", 0) >= 2, summary["incidents"]  # each multiple tried again
    out = capsys.readouterr().out
    assert out.count("failed (RuntimeError: camera unplugged); training goes on") == 1, out[-3000:]
    assert not list((tmp_path / "cam").glob("videos/*.mp4"))  # no half-written file either
    with open(tmp_path / "cam" / "metrics.csv", newline="") as f:
        evals = [r for r in csv.DictReader(f) if r["eval_return_mean"] not in ("", "nan")]
    assert evals and all(float(r["eval_return_mean"]) == 20.0 and float(r["eval_episodes"]) == 4 for r in evals)
