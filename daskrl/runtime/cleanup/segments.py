"""Names of daskrl shared-memory segments on this host, and the sweep that removes a dead process's leftovers.

Standard library and psutil only (through ``procfs``), on purpose: the reaper (reaper.py) runs this module in a
bare interpreter next to every embedded cluster, and importing the package (dask, numpy, gymnasium) would cost it
0.7 s of CPU at launch and about 50 MB of memory for the whole run. ``shm`` re-exports everything here.

A segment is named ``daskrl_<run>_<pid>_<tag>`` (:func:`segment_name`): the run id and the owner's pid let a
sweep tell leftovers of dead processes from live segments.
"""

from __future__ import annotations

import _posixshmem
import os

if __package__:
    from daskrl.runtime.cleanup.procfs import SHM_DIR
else:  # imported by the reaper, started by path
    from procfs import SHM_DIR  # type: ignore[no-redef]

PREFIX = "daskrl_"


def segment_name(run_id: str, pid: int, tag: str) -> str:
    """The name of a new segment of ``run_id`` owned by ``pid``; :func:`owner_pid` reads the pid back."""
    return f"{PREFIX}{run_id}_{pid}_{tag}"


def unlink_quietly(name: str) -> None:
    """Remove a segment by name; one that is already gone is fine."""
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def list_segments(run_id: str | None = None) -> list[str]:
    """Names of daskrl segments on this host (optionally of one run)."""
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    prefix = PREFIX + (f"{run_id}_" if run_id else "")
    return sorted(n for n in names if n.startswith(prefix))


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (on this host)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_pid(name: str) -> int | None:
    """The pid encoded in a segment name ``daskrl_<run>_<pid>_<tag>``, or None if it does not parse."""
    parts = name[len(PREFIX):].split("_")
    if len(parts) < 3:
        return None
    try:
        return int(parts[1])
    except ValueError:
        return None


def sweep(run_id: str | None = None, dead_only: bool = True) -> list[str]:
    """Unlink leftover segments: those whose owner process is dead (or, with ``dead_only=False``, all of
    ``run_id``'s). Returns the names removed. Safe to call at any time from any process on the host."""
    removed = []
    for name in list_segments(run_id):
        pid = owner_pid(name)
        if dead_only and (pid is None or pid_alive(pid)):
            continue
        unlink_quietly(name)
        removed.append(name)
    return removed
