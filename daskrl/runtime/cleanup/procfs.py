"""What Linux's /proc says of processes: start times, parents and children, command lines, and the ``/dev/shm``
entries a process maps or holds open.

Standard library only, for the same reason as ``segments``: the reaper (``reaper.py``) and the env-process watcher
(``process_watcher.py``) are started by path in bare interpreters and import this module by its bare name. Where
there is no /proc (not Linux), every question gets the empty answer.
"""

from __future__ import annotations

import os

SHM_DIR = "/dev/shm"


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command (which may hold spaces and parentheses): state first."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; None for no such live process. A zombie (ended, not yet
    reaped by its parent) counts as gone: it holds nothing. Pid and start time together name one process for good
    (a pid alone may be recycled)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None else None


def command_line(pid: int) -> list[str]:
    """Its arguments ([] for a process that is gone or not ours to read)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def all_pids() -> list[int]:
    """Every process on the host."""
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except FileNotFoundError:
        return []


def children(pid: int) -> list[int]:
    """Direct children of ``pid``: every thread's, from /proc (a scan of every process where the kernel lacks it)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except FileNotFoundError:
            return [p for p in all_pids() if parent_of(p) == pid]
        except OSError:  # the thread ended meanwhile
            continue
    return out


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (not ``pid`` itself)."""
    found: set[int] = set()
    todo = children(pid)
    while todo:
        child = todo.pop()
        if child not in found:
            found.add(child)
            todo.extend(children(child))
    return found


def shm_in_use(pids: list[int] | None = None, prefix: str = "") -> set[str]:
    """Names of the ``/dev/shm`` entries starting with ``prefix`` that these processes (every process when None) map
    or hold open."""
    marker = f"{SHM_DIR}/{prefix}"
    used: set[str] = set()
    for pid in all_pids() if pids is None else pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                used.update(line[line.find(marker) + len(SHM_DIR) + 1:].split()[0] for line in f if marker in line)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(marker):
                    used.add(target[len(SHM_DIR) + 1:])
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return used
