"""Weights & Biases (--wandb-project): real tiny runs with the real wandb package in its offline mode (no network),
read back from the ``.wandb`` file wandb wrote: the same series as TensorBoard, the config, the video, and a
resumed run that continues the same W&B run id. And the refusals: wandb missing, W&B options without a project,
a W&B run that cannot start."""

from __future__ import annotations

import json
import math
import struct
import sys
import zlib
from pathlib import Path

import pytest

from daskrl.cli import main
from daskrl.driver.launch.experiment import open_experiment
from daskrl.driver.loop.observers import Observer
from daskrl.monitor.outputs.wandb_log import RUN_ID_FILE

from ..helpers import SMALL_CARTPOLE, run_config, slow

# ---- reading a .wandb file ----

#: the .wandb file's header (wandb's "W&B" magic, 0xBEE1, version 0), then records in blocks of 32 KiB, each piece
#: with a 7-byte header (crc32, length, kind): LevelDB's log format, as wandb writes it
HEADER = struct.Struct("<4sHB")
PIECE = struct.Struct("<IHB")
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list:
    """Every record of a .wandb file as wandb's own protobuf ``Record``; each piece's checksum is checked, so a
    change of format fails here loudly rather than reading nonsense."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert HEADER.unpack_from(data) == (b":W&B", 0xBEE1, 0), "not a .wandb file of the format this reader knows"
    records, pos, parts = [], HEADER.size, b""
    while pos + PIECE.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < PIECE.size:  # a block's tail too short for a header is padding
            pos += left
            continue
        crc, length, kind = PIECE.unpack_from(data, pos)
        if kind == 0 and length == 0:  # the rest of the block is padding
            pos += left
            continue
        body = data[pos + PIECE.size:pos + PIECE.size + length]
        assert zlib.crc32(body, zlib.crc32(bytes([kind]))) == crc, f"bad checksum at byte {pos} of {path}"
        pos += PIECE.size + length
        parts += body
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            records.append(record)
            parts = b""
    return records


def offline_runs(experiment_dir: Path) -> list[tuple[object, list[dict], Path]]:
    """Each offline run segment of an experiment, oldest first: (its run record, its history rows as {key: value},
    its folder)."""
    out = []
    for folder in sorted((experiment_dir / "wandb").glob("offline-run-*")):
        records = wandb_records(next(folder.glob("run-*.wandb")))
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        rows = [{"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in r.history.item}
                for r in records if r.WhichOneof("record_type") == "history"]
        out.append((run, rows, folder))
    return out


def series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """A W&B series as (env steps, value), in the order it was logged."""
    return [(row["env_steps"], row[key]) for row in rows if key in row]


# ---- a logged run ----


#: the first run's ceiling: it stops once it has what the tests read (StopOnceEvaluated), in about 3 s here
CEILING_S = 60.0


class StopOnceEvaluated(Observer):
    """Stops the run once three rows have episode returns and one has an evaluation: a run stopped after a fixed
    time on a slow, busy machine could stop with its first evaluation still playing (an evaluation in progress at
    the stop is dropped: its result could go into no row)."""

    def __init__(self) -> None:
        self.returns = self.evaluations = 0

    def on_report(self, run, row: dict) -> None:
        self.returns += math.isfinite(row["episode_return_mean"])
        self.evaluations += math.isfinite(row.get("eval_return_mean", math.nan))
        if self.returns >= 3 and self.evaluations:
            run.request_stop("the W&B tests have what they read")


@pytest.fixture(scope="module")
def logged(session, tmp_path_factory):
    """A tiny CartPole run logged to W&B offline (until it has three rows of returns and an evaluation), with a
    video, then the same experiment resumed for a moment (it stops at its first poll). On the module's cluster: no
    cluster start per run."""
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'daskrl[wandb]')")
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (pip install 'daskrl[video]')")
    pytest.importorskip("pygame", reason="CartPole renders with pygame (pip install 'gymnasium[classic-control]')")
    import wandb

    from daskrl import train

    tmp = tmp_path_factory.mktemp("wandb")
    config = run_config(tmp, "wb", base=SMALL_CARTPOLE, report_interval=0.25, train_for_seconds=CEILING_S,
                        train_for_env_steps=0,
                        eval_interval_env_steps=1_000, eval_episodes=2, save_video_every_env_steps=2_000,
                        wandb_project="daskrl-tests", wandb_group="tiny", wandb_job_type="train",
                        wandb_tags=["offline", "cartpole"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        try:
            first = train(config, client=session.client, observers=[StopOnceEvaluated()])
            resumed = train(config.replace(resume=True, train_for_seconds=0.1), client=session.client)
        finally:
            wandb.teardown()  # its service process ends with the runs, not with the test process
    return {"dir": tmp / "wb", "first": first, "resumed": resumed, "runs": offline_runs(tmp / "wb")}


@slow("two small training runs logged to W&B")
def test_wandb_logs_the_series_tensorboard_gets(logged):
    """Each run (the first, the resumed one) against its own TensorBoard event file: every tag, every point."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    event_files = sorted((logged["dir"] / "tensorboard").glob("events.out.tfevents.*"))
    assert len(event_files) == len(logged["runs"]) == 2
    for (_, rows, _), event_file in zip(logged["runs"], event_files, strict=True):
        tb = EventAccumulator(str(event_file), size_guidance={"scalars": 0})
        tb.Reload()
        tags = tb.Tags()["scalars"]
        assert {k for row in rows for k in row if not k.startswith(("_", "video/"))} == {*tags, "env_steps"}
        for tag in tags:
            points = [(p.step, pytest.approx(p.value, rel=1e-6, abs=1e-6)) for p in tb.Scalars(tag)]
            assert series(rows, tag) == points, tag
    _, rows, _ = logged["runs"][0]
    assert len(series(rows, "episode/return_mean")) >= 3 and len(series(rows, "learner/loss")) >= 3, rows
    assert series(rows, "eval/return_mean") and series(rows, "time/learner/train")


@slow("two small training runs logged to W&B")
def test_wandb_holds_the_config_and_the_run_names(logged):
    run, _, _ = logged["runs"][0]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["env"] == "CartPole-v1" and config["train_for_seconds"] == CEILING_S and config["rollout"] == 16
    assert config["wandb_project"] == "daskrl-tests" and config["save_video_every_env_steps"] == 2_000
    assert (run.project, run.run_group, run.job_type, list(run.tags), run.display_name) == (
        "daskrl-tests", "tiny", "train", ["offline", "cartpole"], "wb")  # the name: the experiment's, by default


@slow("two small training runs logged to W&B")
def test_wandb_gets_the_videos_at_their_env_steps(logged):
    _, rows, folder = logged["runs"][0]
    recorded = sorted((logged["dir"] / "videos").glob("video_*.mp4"))
    assert recorded, "the run recorded no video"
    videos = [row for row in rows if "video/path" in row]
    assert videos and all(row["video/_type"] == "video-file" for row in videos)
    by_steps = {int(p.stem.removeprefix("video_")): p for p in recorded}
    for row in videos:  # the file W&B keeps is the file the run recorded at those env steps
        kept = folder / "files" / row["video/path"]
        assert kept.read_bytes() == by_steps[row["env_steps"]].read_bytes()


@slow("two small training runs logged to W&B")
def test_a_resumed_run_continues_the_same_wandb_run(logged):
    (first, first_rows, _), (resumed, resumed_rows, _) = logged["runs"]
    saved = (logged["dir"] / RUN_ID_FILE).read_text().strip()
    assert first.run_id == resumed.run_id == saved
    before, after = ([step for step, _ in series(rows, "health/incidents")] for rows in (first_rows, resumed_rows))
    assert after and min(after) > max(before)  # on from the checkpoint's env steps, drawn after the first run's


# ---- refusals ----


def test_a_missing_wandb_is_one_error_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if it were not installed: its import fails
    code = main(["train", "--env", "CartPole-v1", "--wandb-project", "p", "--train-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "pip install 'daskrl[wandb]'" in err and "--wandb-project" in err, err
    assert not list(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.parametrize("flags, said", [
    (["--wandb-group", "g", "--wandb-tags", "a", "b"], "--wandb-group, --wandb-tags describe a Weights & Biases run"),
    (["--wandb-project", "team/project"], "--wandb-project must be a W&B project name (none of / \\ # ? % :)"),
    (["--wandb-project", "p", "--wandb-tags", "x" * 65], "a W&B tag has at most 64 characters"),
])
def test_wandb_options_that_cannot_work_are_refused_before_the_run(tmp_path, capsys, flags, said):
    code = main(["train", "--env", "CartPole-v1", *flags, "--train-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and said in err, err
    assert not list(tmp_path.iterdir())


@slow("a run placed on a cluster, refused by W&B")
def test_a_wandb_run_that_cannot_start_is_one_error_and_leaves_nothing(session, tmp_path, monkeypatch):
    """Online with no API key anywhere (no network is needed to refuse): W&B refuses at once, after placement;
    the experiment is left as a run that never started (a new run of it needs no --overwrite)."""
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'daskrl[wandb]')")
    from daskrl import train
    from daskrl.errors import ConfigError

    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home" / "wandb"))
    monkeypatch.setenv("WANDB_LOGIN_TIMEOUT", "1")  # where a terminal would let W&B ask for a key: it gives up
    config = run_config(tmp_path, "refused", base=SMALL_CARTPOLE, wandb_project="daskrl-tests")
    with pytest.raises(ConfigError) as refused:
        train(config, client=session.client)
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and "wandb login" in message and "WANDB_MODE=offline" in message, message
    assert not (tmp_path / "refused" / "wandb").exists() and not (tmp_path / "refused" / RUN_ID_FILE).exists()
    lock, _ = open_experiment(str(tmp_path / "refused"), resume=False, overwrite=False)  # a new run may start there
    lock.release()
