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
