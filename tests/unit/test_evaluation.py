"""Videos refused before a run starts: ``daskrl train --save-video-every-env-steps`` on an env that cannot render
rgb_array frames is one readable error (exit status 2) and writes nothing."""

from __future__ import annotations

import pytest

from daskrl.cli import main


def test_an_env_that_cannot_render_frames_is_one_readable_error(tmp_path, capsys):
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg is not installed (pip install 'daskrl[video]')")
    code = main(["train", "--env", "daskrl/Counting-v0", "--save-video-every-env-steps", "1000",
                 "--train-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "daskrl/Counting-v0" in err and "cannot render rgb_array frames" in err, err
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_enjoy_plays_the_same_episodes_on_its_first_call_in_a_process_as_on_later_ones(tmp_path):
    """Sampled actions come from torch's global generator, seeded when enjoy builds the network: nothing may draw
    from it between that seed and the episodes. The tanh kernel's one-off timing did (its first forward pass in a
    process), so a fresh ``daskrl enjoy`` and a later call in the same process played other episodes."""
    from daskrl.config import Config
    from daskrl.evaluation import enjoy
    from daskrl.evaluation.loading import untrained_model
    from daskrl.learning.checkpoints import CheckpointStore
    from daskrl.models.inputs.activations import _timed_choice

    config = Config.from_flat({"env": "CartPole-v1", "experiment": "untrained", "train_dir": str(tmp_path)})
    (tmp_path / "untrained").mkdir()
    (tmp_path / "untrained" / "config.json").write_text(config.to_json())
    CheckpointStore(tmp_path / "untrained" / "checkpoints").save(
        {"model": untrained_model(config).state_dict(), "env_steps": 0}, 0)
    _timed_choice.cache_clear()  # as in a fresh process: the timing has not run yet
    first, later = (enjoy(str(tmp_path / "untrained"), 5)["returns"] for _ in range(2))
    assert first == later
