"""Videos of a policy: ``daskrl enjoy --video`` and ``--save-video-every-env-steps`` while training.

Frames come from the env's own ``render()`` in ``rgb_array`` mode, one per step: what the env showed when the
policy chose its action (so a video of episodes of N steps in all has N frames). They are written with imageio's
ffmpeg plugin (the ``video`` extra: ``imageio`` and ``imageio-ffmpeg``, which ships an ffmpeg binary), H.264 in
an .mp4 that browsers play, so the HTML report can embed it. A file appears whole or not at all (written under a
temporary name, then renamed), so a report or a viewer never reads half a video.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from daskrl.errors import ConfigError, EnvError


def _imageio():
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the ffmpeg binary imageio writes .mp4 with)
    except ImportError as exc:
        raise ConfigError([f"videos need imageio and imageio-ffmpeg ({exc}): pip install 'daskrl[video]'"]) from exc
    return imageio


def make_render_env(spec: str, seed: int | None = None, env_kwargs: dict[str, Any] | None = None):
    """The env built to render ``rgb_array`` frames, or one readable :class:`ConfigError` when it cannot."""
    from daskrl.envs import make_env

    _imageio()
    try:
        env = make_env(spec, seed=seed, env_kwargs=env_kwargs, render_mode="rgb_array")
    except EnvError as exc:
        raise ConfigError([f"env {spec!r} cannot render rgb_array frames for a video ({exc})"]) from exc
    modes = list(env.metadata.get("render_modes", []))
    try:
        env.reset()  # gymnasium renders only after a reset
        frame = env.render() if getattr(env, "render_mode", None) == "rgb_array" else None
    except Exception as exc:
        env.close()
        raise ConfigError([f"env {spec!r} cannot render rgb_array frames for a video ({type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else 'no message'})"]) from exc
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] not in (1, 3, 4):
        env.close()
        raise ConfigError([f"env {spec!r} cannot render rgb_array frames for a video (its render modes: "
                           f"{', '.join(modes) or 'none'})"])
    return env


def check_can_record(spec: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """Refuse, before a run starts, a video option the env or the installation cannot honour."""
    make_render_env(spec, env_kwargs=env_kwargs).close()


def write_video(path: str, frames: list[np.ndarray], fps: float) -> int:
    """Write ``frames`` (HxWx3 uint8) to ``path`` (.mp4) atomically; returns the number of frames written."""
    imageio = _imageio()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    base, ext = os.path.splitext(path)
    tmp = f"{base}.partial{ext or '.mp4'}"
    # macro_block_size 2: H.264 in yuv420p needs even sides; an odd side is scaled up by one pixel (not to 16)
    with imageio.get_writer(tmp, format="FFMPEG", mode="I", fps=fps, codec="libx264", macro_block_size=2,
                            ffmpeg_log_level="error") as writer:
        for frame in frames:
            writer.append_data(_rgb(frame))
    os.replace(tmp, path)
    return len(frames)


def _rgb(frame: np.ndarray) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.dtype != np.uint8:
        frame = np.clip(frame, 0, 255).astype(np.uint8)
    if frame.shape[2] == 1:
        frame = np.repeat(frame, 3, axis=2)
    return np.ascontiguousarray(frame[..., :3])


def saved_videos(experiment_dir: str) -> list[tuple[int, str]]:
    """The videos a run recorded while training, ``videos/video_<env steps>.mp4``, as (env steps, path) in order of
    env steps (a file being written has another name: see :func:`write_video`)."""
    folder = os.path.join(experiment_dir, "videos")
    found = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        stem, ext = os.path.splitext(name)
        if ext == ".mp4" and stem.startswith("video_") and stem[6:].isdigit():
            found.append((int(stem[6:]), os.path.join(folder, name)))
    return sorted(found)


def video_fps(env) -> float:
    return float(env.metadata.get("render_fps") or 30)
