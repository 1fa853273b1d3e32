"""Crash-safe checkpoint directory: K newest ``checkpoint_<env_steps>.pt`` plus a ``best.pt``.

Every file is written to a temp file in the same directory, fsynced, then ``os.replace``d into place, so a
reader (or a restart after a crash) only ever sees complete checkpoints; half-written temp files never match
the checkpoint name pattern and are ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from daskrl.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where a checkpoint is read or serialized: a driver writing bytes needs none
    import torch

_CHECKPOINT_RE = re.compile(r"^checkpoint_(\d{12})\.pt$")
_TMP_PREFIX = ".tmp_"
BEST_NAME = "best.pt"
BEST_META_NAME = "best.json"


def _torch() -> Any:
    import torch

    return torch


def serialize(state: dict[str, Any]) -> bytes:
    """A checkpoint's bytes, as :meth:`CheckpointStore.save` would write them (torch.save)."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def deserialize(data: bytes) -> dict[str, Any]:
    """The state :func:`serialize` wrote (bytes this run's own learner made: trusted, as the files of this store)."""
    import io

    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (directory entry), not just the file contents."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems do not support fsync on directories
    finally:
        os.close(fd)


def _atomic_write(target: Path, write: Callable[[IO[bytes]], None]) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=_TMP_PREFIX + target.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(target.parent)


class CheckpointStore:
    """Keeps the ``keep`` newest checkpoints (by env steps) and never prunes the one tagged best."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 3) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep

    def _checkpoints(self) -> list[tuple[int, Path]]:
        found = []
        for entry in self.directory.iterdir():
            match = _CHECKPOINT_RE.match(entry.name)
            if match and entry.is_file():
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def best_info(self) -> dict[str, Any] | None:
        """``{"checkpoint": name, "env_steps": int, "score": float | None}`` of the current best, if any."""
        meta = self.directory / BEST_META_NAME
        if not meta.exists():
            return None
        return json.loads(meta.read_text())

    def save(
        self, state: dict[str, Any] | bytes, env_steps: int, tag_best: bool = False, score: float | None = None,
        milestone: bool = False,
    ) -> Path:
        """Atomically write ``checkpoint_<env_steps:012d>.pt``; with ``tag_best`` also ``best.pt``; with
        ``milestone`` also ``milestone_<env_steps:012d>.pt``, which pruning never removes. ``state`` is a dict
        (written with ``torch.save``) or a checkpoint already serialized by ``torch.save`` (:func:`serialize`: what a
        learner sends the driver, so that the driver needs no torch).

        ``score`` is only recorded in ``best.json`` (see ``best_info``); the caller decides what is best.
        """
        if env_steps < 0:
            raise ValueError("env_steps must be >= 0")
        path = self.directory / f"checkpoint_{env_steps:012d}.pt"
        if isinstance(state, bytes):
            _atomic_write(path, lambda f: f.write(state))
        else:
            import torch  # looked up at call time, so tests can simulate a crash inside torch.save

            _atomic_write(path, lambda f: torch.save(state, f))

        if milestone:
            _atomic_write(self.directory / f"milestone_{env_steps:012d}.pt", lambda f: _copy_into(path, f))
        if tag_best:
            _atomic_write(self.directory / BEST_NAME, lambda f: _copy_into(path, f))
            info = {"checkpoint": path.name, "env_steps": env_steps, "score": score}
            _atomic_write(self.directory / BEST_META_NAME, lambda f: f.write(json.dumps(info).encode()))

        self._prune()
        return path

    def _prune(self) -> None:
        info = self.best_info()
        best_name = info["checkpoint"] if info else None
        for _, old in self._checkpoints()[: -self.keep]:
            if old.name != best_name:
                old.unlink(missing_ok=True)

    def steps(self) -> list[int]:
        """The env steps of the checkpoints present, oldest first."""
        return [steps for steps, _ in self._checkpoints()]

    def path_of(self, env_steps: int) -> Path:
        return self.directory / f"checkpoint_{env_steps:012d}.pt"

    def remove_partial_writes(self) -> list[str]:
        """Remove what a writer killed mid-write left (its temporary files: never read, since a checkpoint only
        gets its name once complete); call it only while no other process writes here (the experiment lock)."""
        removed = []
        for entry in self.directory.iterdir():
            if entry.name.startswith(_TMP_PREFIX) and entry.is_file():
                entry.unlink(missing_ok=True)
                removed.append(entry.name)
        return removed

    def latest(self) -> Path | None:
        checkpoints = self._checkpoints()
        return checkpoints[-1][1] if checkpoints else None

    def milestones(self) -> list[Path]:
        """The milestone checkpoints, oldest first."""
        return sorted(self.directory.glob("milestone_*.pt"))

    def best(self) -> Path | None:
        path = self.directory / BEST_NAME
        return path if path.is_file() else None

    def load(
        self, which: str | os.PathLike[str] = "latest", map_location: str | torch.device = "cpu"
    ) -> dict[str, Any]:
        """Load ``"latest"``, ``"best"`` or an explicit path.

        Tries ``weights_only=True`` first (safe for tensors, plain containers and numbers). Only if that
        rejects the file *and* it lives in this store's directory, i.e. we wrote it ourselves, do we fall back
        to full unpickling (``weights_only=False``), which can execute arbitrary code from foreign files.
        """
        if which == "latest":
            path = self.latest()
        elif which == "best":
            path = self.best()
        else:
            path = Path(which)
        if path is None or not path.is_file():
            raise FileNotFoundError(f"no {which!s} checkpoint in {self.directory}")
        try:
            return _torch().load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError:
            if path.resolve().parent != self.directory.resolve():
                raise
            return _torch().load(path, map_location=map_location, weights_only=False)


def training_digest(state: dict[str, Any]) -> str:
    """SHA-256 of every tensor of a checkpoint's model and optimizer state, in key order: two checkpoints that
    hold the same training state bit for bit have the same (a replay and its run, two --deterministic runs)."""
    torch = _torch()

    digest = hashlib.sha256()

    def walk(tree: Any, prefix: str) -> None:
        if isinstance(tree, torch.Tensor):
            digest.update(prefix.encode() + tree.detach().contiguous().cpu().numpy().tobytes())
        elif isinstance(tree, dict):
            for key in sorted(tree, key=str):
                walk(tree[key], f"{prefix}/{key}")
        elif isinstance(tree, list | tuple):
            for i, value in enumerate(tree):
                walk(value, f"{prefix}/{i}")

    for part in ("model", "optimizer"):
        walk(state[part], part)
    return digest.hexdigest()


def _copy_into(source: Path, dest: IO[bytes]) -> None:
    with open(source, "rb") as src:
        shutil.copyfileobj(src, dest)


def checkpoint_dirs(experiment_dir: str, num_policies: int) -> list[str]:
    """Where each policy's checkpoints go (one policy: ``checkpoints/`` itself)."""
    root = os.path.join(experiment_dir, "checkpoints")
    return [root] if num_policies == 1 else [os.path.join(root, f"policy_{k}") for k in range(num_policies)]


def checkpoint_file(path: str, option: str = "--init-checkpoint") -> str:
    """The checkpoint ``option`` names: a file, or the newest checkpoint of an experiment directory (a bundle of
    ``daskrl publish`` is one: its ``checkpoints/`` holds the checkpoint it publishes) or of a folder of them."""
    if os.path.isfile(path):
        return path
    folder = os.path.join(path, "checkpoints") if os.path.isdir(os.path.join(path, "checkpoints")) else path
    found = sorted(n for n in os.listdir(folder) if n.startswith("checkpoint_") and n.endswith(".pt")) \
        if os.path.isdir(folder) else []
    if not found:
        raise ConfigError([f"{option} {path!r} is neither a checkpoint file nor an experiment directory (or bundle, "
                           "or a folder such as checkpoints/policy_0) with checkpoints"])
    return os.path.join(folder, found[-1])


def initial_weights(path: str, sampling: bool = False, opponent: bool = False) -> dict[str, Any]:
    """``--init-checkpoint``: the weights (with their normalizer statistics) a new experiment starts from, a
    sampling-only run acts with (``sampling``) or every game is played against (``opponent``: --frozen-opponent), as
    ``{"version": 0, "weights": {name: array}}``; says which checkpoint it took."""
    from daskrl.monitor.console import say

    path = checkpoint_file(path, "--frozen-opponent" if opponent else "--init-checkpoint")
    state = _torch().load(path, map_location="cpu", weights_only=True)
    which = f"{path} ({int(state.get('env_steps', 0)):,} env steps, policy version {state.get('policy_version', 0)} there)"
    say(f"daskrl: sampling with the policy of {which}" if sampling
        else f"daskrl: every game against the frozen policy of {which}" if opponent
        else f"daskrl: starting from the weights of {which}; the optimizer starts afresh")
    return {"version": 0, "weights": {k: v.numpy() for k, v in state["model"].items()}}
