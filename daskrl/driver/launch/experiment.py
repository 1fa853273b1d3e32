"""An experiment directory owned by one live run: an OS-level lock, and the rule for new, resumed and overwritten runs.

Why a lock: two runs writing one experiment corrupt it (the second truncates the first's ``metrics.csv`` while the
first still appends to it). The lock is ``fcntl.flock`` on ``<experiment>/.lock``: the kernel drops it when its
process dies, however it dies, so a crashed run never blocks the next one. The file also holds the owner's host, pid
and start time, for the refusal message, and for a note when a run takes over from one that died without releasing.

The rule, checked under the lock before anything else is written:

- a new run (no ``--resume``) on a directory that holds any file of a run (more than the lock and the log a run
  that never started leaves) refuses, unless ``--overwrite`` empties it first;
- ``--resume`` needs a checkpoint to continue from.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass

from daskrl.errors import ConfigError, ExperimentInUseError

LOCK_NAME = ".lock"
#: the run's log file in its experiment directory: Dask's and daskrl's log lines, with full tracebacks
LOG_NAME = "daskrl.log"


def run_log_path(directory: str) -> str:
    return os.path.join(directory, LOG_NAME)


@dataclass
class ExperimentLock:
    """``flock`` on ``<directory>/.lock`` (see the module docstring); ``acquire`` never waits."""

    directory: str
    _fd: int | None = None

    @property
    def path(self) -> str:
        return os.path.join(self.directory, LOCK_NAME)

    def acquire(self) -> str:
        """Take the lock or raise :class:`ExperimentInUseError` naming the owner. Returns a note when the previous
        owner died holding it (its record is still in the file), else ''."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(fd)
            os.close(fd)
            raise ExperimentInUseError(
                f"experiment {self.directory!r} is in use by {_describe(owner)}: wait for that run to end, or "
                "choose another --experiment (nothing was changed)") from None
        previous = _read_owner(fd)
        record = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        if previous.get("pid"):  # a clean release empties the file: a record left means its owner died
            return f"took over the lock of {_describe(previous)}, which ended without releasing it"
        return ""

    def release(self) -> None:
        """Empty the record (a clean end) and drop the lock; safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the descriptor drops the flock


def _read_owner(fd: int) -> dict:
    try:
        raw = os.pread(fd, 4096, 0)
        owner = json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _describe(owner: dict) -> str:
    if not owner.get("pid"):
        return "another run"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("started", 0)))
    return f"the run with pid {owner['pid']} on host {owner.get('host', '?')} (started {started})"


def has_checkpoint(directory: str) -> bool:
    """A checkpoint to resume from: in ``checkpoints/``, or with several policies in ``checkpoints/policy_0/``."""
    for checkpoints in (os.path.join(directory, "checkpoints"), os.path.join(directory, "checkpoints", "policy_0")):
        if os.path.isdir(checkpoints) and any(n.startswith("checkpoint_") for n in os.listdir(checkpoints)):
            return True
    return False


def _holds_files(directory: str) -> bool:
    """Whether anything of a run lies below ``directory``: empty folders hold nothing to lose, and a lock file and a
    log alone are what a run that never started (an unreachable cluster, say) leaves."""
    for root, _, files in os.walk(directory):
        if any(root != directory or name not in (LOCK_NAME, LOG_NAME) for name in files):
            return True
    return False


def open_experiment(directory: str, resume: bool, overwrite: bool) -> tuple[ExperimentLock, str]:
    """Create ``directory`` if needed, lock it, and apply the new/resume/overwrite rule under the lock.

    Returns the held lock and a note for the user ('' when there is nothing to say). A refusal raises
    :class:`ConfigError` (or :class:`ExperimentInUseError`) with nothing written: a directory created here is
    removed again.
    """
    if resume and overwrite:
        raise ConfigError(["--resume and --overwrite contradict each other: --resume continues the experiment, "
                           "--overwrite starts it again from nothing"])
    created = not os.path.exists(directory)
    os.makedirs(directory, exist_ok=True)
    lock = ExperimentLock(directory)
    note = lock.acquire()  # a refusal here leaves the directory to its owner
    try:
        contents = [n for n in os.listdir(directory) if n != LOCK_NAME]
        if resume and not has_checkpoint(directory):
            raise ConfigError([f"--resume: experiment {directory!r} has no checkpoint to resume from"])
        if not resume and _holds_files(directory):
            if not overwrite:
                raise ConfigError([
                    f"experiment {directory!r} already exists: pass --resume to continue it, --overwrite to start it "
                    "again from nothing, or choose another --experiment name (nothing was changed)"])
            for name in contents:
                path = os.path.join(directory, name)
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
            note = "; ".join(filter(None, [note, f"--overwrite: removed what {directory!r} held ({len(contents)} "
                                                 "entries)"]))
    except BaseException:
        if created:  # ours alone, and nothing but the lock file in it
            shutil.rmtree(directory, ignore_errors=True)
        lock.release()
        raise
    return lock, note
