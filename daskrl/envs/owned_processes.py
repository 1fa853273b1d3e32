"""The processes and ``/dev/shm`` entries an env creates, so that none outlives the process that built the env.

Some env packages run their simulator in processes of their own: VizDoom starts a ``vizdoom`` engine per game and
talks to it through ``/dev/shm/ViZDoom*`` entries. Closing the env ends them; a process that dies without closing
its envs (SIGKILL, out of memory, a segfault, a kill of the whole process group) leaves engines running and entries
in ``/dev/shm``. :func:`daskrl.envs.make_env` therefore notes what each env created while it was built and first
reset: the new descendants of this process, and the new ``/dev/shm`` entries that this process or those descendants
map or hold open. If there is any, a watcher process (``daskrl/runtime/cleanup/process_watcher.py``, one per owner
process, in a session of its own) is told of them, and ends and removes them once the owner is gone, however it went; and
the env's ``close`` ends and removes whatever its own close left, so a clean end, Ctrl-C and a retired worker
leave nothing either. An env that creates nothing (CartPole, Atari) costs two directory reads and no watcher.

(``make_env`` resets a seeded env itself; an unseeded one is looked at around its first ``reset``, where VizDoom
starts its game.) Processes an env starts later than that (an engine restarted mid-run) are not seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daskrl.runtime.cleanup import process_watcher, procfs

MULTIPROCESSING_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
OWN_EXIT_SECONDS = 0.5  # how long a closed env's processes get to end by themselves before they are ended


@dataclass(frozen=True)
class Before:
    """What this process had before an env was built: its descendants and the entries of ``/dev/shm``."""

    processes: frozenset[int]
    entries: frozenset[str]


@dataclass
class Created:
    """What one env created: processes (pid -> start time in clock ticks) and ``/dev/shm`` entry names."""

    processes: dict[int, int] = field(default_factory=dict)
    entries: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.processes or self.entries)

    def as_message(self) -> dict[str, Any]:
        return {"processes": sorted(self.processes.items()), "entries": sorted(self.entries)}


def shm_entries() -> set[str]:
    try:
        return {n for n in os.listdir(procfs.SHM_DIR) if not n.startswith(process_watcher.NOT_ENV_ENTRIES)}
    except FileNotFoundError:
        return set()


def _is_multiprocessing_helper(pid: int) -> bool:
    return any(helper in arg for arg in procfs.command_line(pid) for helper in MULTIPROCESSING_HELPERS)


def snapshot() -> Before:
    return Before(frozenset(procfs.descendants(os.getpid())), frozenset(shm_entries()))


class _OwnerMark:
    """Holds ``DASKRL_ENV_OWNER`` in this process's environment while any thread builds an env (see
    ``process_watcher``), so what the env starts (and execs) carries it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.builds = 0

    def enter(self) -> None:
        with self.lock:
            if self.builds == 0:
                os.environ[process_watcher.OWNER_VARIABLE] = process_watcher.owner_mark(os.getpid())
            self.builds += 1

    def leave(self) -> None:
        with self.lock:
            self.builds -= 1
            if self.builds == 0:
                os.environ.pop(process_watcher.OWNER_VARIABLE, None)


_MARK = _OwnerMark()


@contextlib.contextmanager
def building() -> Iterator[Before]:
    """Around an env's build (or first reset): what was there before, with the owner mark set meanwhile."""
    before = snapshot()
    _MARK.enter()
    try:
        yield before
    finally:
        _MARK.leave()


def created_since(before: Before) -> Created:
    """What appeared since ``before`` and belongs to this process: new descendants (not multiprocessing's helpers,
    not the watcher), and new entries that this process or those descendants use (not another process's)."""
    created = Created()
    for pid in procfs.descendants(os.getpid()) - before.processes - {_TRACKER.watcher_pid}:
        started = procfs.start_time(pid)
        if started is not None and not _is_multiprocessing_helper(pid):
            created.processes[pid] = started
    new_entries = shm_entries() - before.entries
    if new_entries:
        created.entries = process_watcher.entries_in_use([os.getpid(), *created.processes]) & new_entries
    return created


def release(created: Created) -> None:
    """End what ``created`` names that is still running (after a moment to end by itself) and remove its entries;
    inside :func:`released_together`, with the others released there."""
    pending = getattr(_TOGETHER, "pending", None)
    if pending is not None:
        pending.append(created)
    else:
        release_all([created])


def release_all(batch: list[Created]) -> None:
    """:func:`release` for several envs' at once: one wait for all their processes to end by themselves, and one
    SIGTERM grace for those that do not, instead of one of each per env."""
    batch = [created for created in batch if created]
    if not batch:
        return
    processes = {pid: started for created in batch for pid, started in created.processes.items()}
    if not _ended_by_themselves(processes, OWN_EXIT_SECONDS):
        process_watcher.end_processes(processes)
    process_watcher.remove_entries(set().union(*(created.entries for created in batch)))
    for created in batch:
        _TRACKER.send("forget", created)


_TOGETHER = threading.local()  # .pending: the releases deferred by released_together in this thread


@contextlib.contextmanager
def released_together() -> Iterator[None]:
    """Envs closed in this thread meanwhile end what their closes left at the end, all at once (:func:`release_all`):
    released one after the other, a group of envs whose processes ignore SIGTERM (VizDoom's engines) took
    ``OWN_EXIT_SECONDS`` plus ``process_watcher.GRACE_SECONDS`` per env to close."""
    if getattr(_TOGETHER, "pending", None) is not None:  # already inside one: it releases these too
        yield
        return
    _TOGETHER.pending = []
    try:
        yield
    finally:
        pending, _TOGETHER.pending = _TOGETHER.pending, None
        release_all(pending)


def close_all(envs: Iterable[Any]) -> None:
    """Close every env of ``envs``, then end what their closes left, all at once (:func:`released_together`)."""
    with released_together():
        for env in envs:
            env.close()


def _ended_by_themselves(processes: dict[int, int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(procfs.start_time(pid) == started for pid, started in processes.items()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def track(env: Any, before: Before, was_reset: bool = True) -> Any:
    """Hand what ``env`` created since ``before`` to this process's watcher, and make ``env.close()`` end it. An env
    not reset yet (built without a seed) is looked at again around its first ``reset``, where games often start."""
    created = created_since(before)
    if created:
        _TRACKER.send("watch", created)
        _close_releases(env, created)
    elif not was_reset:
        _track_first_reset(env)
    return env


def _track_first_reset(env: Any) -> None:
    reset = env.reset

    def first_reset(*args: Any, **kwargs: Any) -> Any:
        env.reset = reset  # later resets are the env's own again
        with building() as before:
            try:
                return reset(*args, **kwargs)
            finally:
                track(env, before)

    try:
        env.reset = first_reset
    except AttributeError:  # see _close_releases
        pass


def _close_releases(env: Any, created: Created) -> None:
    close = env.close

    def close_and_release() -> Any:
        try:
            return close()
        finally:
            release(created)

    try:
        env.close = close_and_release
    except AttributeError:  # a class that forbids it: its processes still end with this process (the watcher)
        pass


class _Tracker:
    """This process's watcher (started at the first env that creates anything) and the pipe to it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner = -1
        self.watcher: subprocess.Popen | None = None
        self.live: dict[int, Created] = {}  # id(created) -> created, resent to a watcher started anew

    @property
    def watcher_pid(self) -> int:
        return self.watcher.pid if self.watcher is not None and self.owner == os.getpid() else -1

    def send(self, verb: str, created: Created) -> None:
        """Tell the watcher to watch or forget ``created``; a watcher that is not running (none yet, killed, or the
        parent's in a forked child) is started and told everything live."""
        with self.lock:
            if verb == "watch":
                self.live[id(created)] = created
            else:
                self.live.pop(id(created), None)
            if self.owner == os.getpid() and self.watcher is not None and self.watcher.poll() is None:
                try:
                    self._write(verb, created)
                    return
                except OSError:  # it died since poll()
                    pass
            if self.live:
                self._start()

    def _start(self) -> None:
        self.owner = os.getpid()
        unmarked = {k: v for k, v in os.environ.items() if k != process_watcher.OWNER_VARIABLE}  # not an env's
        self.watcher = subprocess.Popen(
            [sys.executable, str(Path(process_watcher.__file__)), str(self.owner)], env=unmarked,
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for created in self.live.values():
            self._write("watch", created)

    def _write(self, verb: str, created: Created) -> None:
        assert self.watcher is not None and self.watcher.stdin is not None
        self.watcher.stdin.write((json.dumps({verb: created.as_message()}) + "\n").encode())
        self.watcher.stdin.flush()


_TRACKER = _Tracker()
