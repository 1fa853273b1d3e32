"""What the host says of its processes: start times, children, command lines, environments, and the ``/dev/shm``
entries a process maps or holds open.

psutil answers what it can: it is installed with distributed, and it already handles a process that ends or turns
zombie while it is read, or that is not ours to read (``psutil.Error`` here means: no answer). Three answers are still
read from /proc by hand, each where psutil's would be wrong or far slower (said at each). The reaper (``reaper.py``)
and the env-process watcher (``process_watcher.py``) are started by path in bare interpreters and import this module by
its bare name, so it imports the standard library and psutil only. Where there is no /proc (not Linux), the answers
read by hand are empty.
"""

from __future__ import annotations

import os

import psutil

SHM_DIR = "/dev/shm"


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; None for no such live process. A zombie (ended, not yet
    reaped by its parent) counts as gone: it holds nothing. Pid and start time together name one process for good
    (a pid alone may be recycled)."""
    # by hand: psutil's create_time() adds /proc/stat's btime, whole seconds and moved by a clock step between reads
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command, which may hold spaces: state first
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def command_line(pid: int) -> list[str]:
    """Its arguments ([] for a process that is gone or not ours to read)."""
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def environment(pid: int) -> dict[str, str]:
    """Its environment variables ({} for a process that is gone or not ours to read)."""
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


def all_pids() -> list[int]:
    """Every process on the host."""
    try:
        return psutil.pids()
    except OSError:  # a Linux without /proc mounted
        return []


def children(pid: int) -> list[int]:
    """Direct children of ``pid``, every thread's (a zombie child too, until its parent reaps it)."""
    # by hand: the kernel lists each thread's children; psutil's children() reads every process on the host for them
    try:
        out: list[int] = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        return out
    except FileNotFoundError:  # gone, a thread that ended, a kernel without the lists, or no /proc
        return _children_by_scan(pid)
    except OSError:
        return []


def _children_by_scan(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


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
        used |= _mapped(pid, marker) | _held_open(pid, marker)
    return {path[len(SHM_DIR) + 1:] for path in used}


def shm_inodes_mapped(pids: list[int] | None = None) -> set[int]:
    """Inodes of the ``/dev/shm`` files these processes (every process when None) map, under whatever name they
    mapped them: the creator of a POSIX semaphore maps it under the temporary name glibc made it with
    (``/dev/shm/sem.XXXXXX (deleted)``) before linking it to its own name, so only the inode tells it is that one."""
    marker = f" {SHM_DIR}/"
    inodes: set[int] = set()
    for pid in all_pids() if pids is None else pids:
        try:
            with open(f"/proc/{pid}/maps") as f:  # address perms offset dev inode path
                inodes |= {int(line.split()[4]) for line in f if marker in line}
        except OSError:  # gone meanwhile, not ours to read, or no /proc
            continue
    return inodes


def _mapped(pid: int, marker: str) -> set[str]:
    # by hand: psutil's memory_maps() reads /proc/PID/smaps, where the kernel counts each mapping's pages (11x slower)
    try:
        with open(f"/proc/{pid}/maps") as f:
            return {line[line.find(marker):].split()[0] for line in f if marker in line}
    except OSError:  # gone meanwhile, not ours to read, or no /proc
        return set()


def _held_open(pid: int, marker: str) -> set[str]:
    try:
        return {f.path for f in psutil.Process(pid).open_files() if f.path.startswith(marker)}
    except psutil.Error:
        return set()
