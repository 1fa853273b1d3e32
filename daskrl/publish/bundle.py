"""A result bundle's folder: what it holds, where, and how it is written and read back.

A bundle is a folder in the Hugging Face Hub's model repo layout (a ``README.md`` model card at the top, any files
beside it) that is also a daskrl experiment directory with one checkpoint: ``config.json`` and ``checkpoints/``. So
``daskrl enjoy --from FOLDER`` and ``daskrl train --init-checkpoint FOLDER`` read it with the code that reads an
experiment, and what the card says was measured is what ``enjoy`` measures on it.

The checkpoint is written with the weights only (tensors and numbers: what ``torch.load(weights_only=True)``
reads), without the optimizer or a replay buffer: a bundle from elsewhere is loaded without unpickling code, and
is refused if it needs more. The folder is built under a temporary name beside the output and renamed at the end,
so a failed publish leaves no half bundle that looks whole.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from daskrl.config import Config
from daskrl.errors import ConfigError
from daskrl.learning.checkpoints import CheckpointStore

CARD = "README.md"
CONFIG = "config.json"
CHECKPOINTS = "checkpoints"
ONNX = "policy.onnx"
PT2 = "policy.pt2"
VIDEO = "replay.mp4"
MANIFEST = "manifest.json"
#: the spec a sweep's bundle carries (``daskrl sweep sweep.json`` runs it again)
SWEEP_SPEC = "sweep.json"
#: what a checkpoint in a bundle keeps of the experiment's: the network (its normalizer statistics included) and
#: what it was trained for
KEPT_STATE = ("model", "env_steps", "train_steps", "policy_version")


def check_output(output: str, overwrite: bool) -> None:
    """Refuse, before any work, an output folder that holds something, unless ``overwrite`` and it is a bundle (a
    mistyped path to a folder of one's own is never deleted)."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise ConfigError([f"--output {output!r} is a file: give a folder to write the bundle into"])
    if not path.is_dir() or not any(path.iterdir()):
        return
    if not overwrite:
        raise ConfigError([f"--output {output!r} exists and is not empty: give a new folder, or --overwrite to "
                           "replace a bundle written before"])
    if not (path / MANIFEST).is_file():
        raise ConfigError([f"--output {output!r} is not a daskrl bundle (no {MANIFEST}): --overwrite replaces only "
                           "a bundle, give another folder"])


def staging_folder(output: str) -> Path:
    """The empty folder a bundle is built in, beside ``output`` (one rename away from it)."""
    target = Path(output).resolve()
    staging = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def move_into_place(staging: Path, output: str) -> str:
    """Replace ``output`` (empty, absent, or a bundle :func:`check_output` let through) by the built folder."""
    target = Path(output).resolve()
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return str(target)


def copy_policy(experiment_dir: str, which: str, folder: Path) -> dict[str, Any]:
    """The experiment's ``config.json`` and its ``which`` checkpoint (weights only) into ``folder``; returns what
    the checkpoint was trained for."""
    from daskrl.evaluation.loading import load_state, read_config

    config = read_config(experiment_dir)
    state = load_state(experiment_dir, config, which)
    kept = {key: state[key] for key in KEPT_STATE if key in state}
    steps = int(kept.get("env_steps", 0))
    shutil.copyfile(os.path.join(experiment_dir, CONFIG), folder / CONFIG)
    CheckpointStore(folder / CHECKPOINTS, keep=1).save(kept, steps)
    return {"env_steps": steps, "policy_version": int(kept.get("policy_version", 0))}


def bundle_dir(folder: str) -> str:
    """``folder`` checked as a bundle that ``enjoy --from`` can play: a config, one checkpoint of weights only."""
    path = Path(folder)
    if not (path / CONFIG).is_file():
        raise ConfigError([f"--from {folder!r} is not a daskrl bundle (no {CONFIG}): write one with daskrl publish"])
    checkpoint = CheckpointStore(path / CHECKPOINTS).latest() if (path / CHECKPOINTS).is_dir() else None
    if checkpoint is None:
        raise ConfigError([f"--from {folder!r} is not a daskrl bundle (no checkpoint in {CHECKPOINTS}/): write one "
                           "with daskrl publish"])
    try:
        torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ConfigError([f"--from {folder!r}: {checkpoint.name} is not a checkpoint of weights only "
                           f"({type(exc).__name__}); a bundle's checkpoint is loaded without unpickling code"]) from exc
    Config.from_json((path / CONFIG).read_text())  # a config this daskrl reads (a ConfigError names what it lacks)
    return str(path)


def file_digests(folder: Path) -> dict[str, dict[str, Any]]:
    """Each file of the folder (relative path -> size and sha256), so a copy can be checked against the bundle."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out[path.relative_to(folder).as_posix()] = {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
    return out
