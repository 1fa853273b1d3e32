"""The POSIX semaphores a run's processes hold, so that the reaper can remove them if the whole run is killed.

Dask starts worker processes through multiprocessing (spawn or forkserver), whose locks are named semaphores in
/dev/shm (``sem.mp-*``). Python's resource tracker, a child of the driver, unlinks them when the driver ends, even
by SIGKILL; but a signal to the whole process group (``kill -9 -PGID``, a terminal's session ending) kills the
tracker too, and the semaphores stay until reboot. The reaper, in its own session, records which semaphores the
driver's process tree maps while it lives and removes those that no live process maps once the tree is gone.

Standard library and psutil only (through ``procfs``), for the same reason as ``segments``.
"""

from __future__ import annotations

import os

if __package__:
    from daskrl.runtime.cleanup import procfs
else:  # imported by the reaper, started by path
    import procfs  # type: ignore[no-redef]

MULTIPROCESSING_PREFIX = "sem.mp-"


def on_disk() -> set[str]:
    """Names of all multiprocessing semaphores in /dev/shm, whoever made them."""
    try:
        return {n for n in os.listdir(procfs.SHM_DIR) if n.startswith(MULTIPROCESSING_PREFIX)}
    except FileNotFoundError:
        return set()


def of_this_user() -> set[str]:
    """Names of the multiprocessing semaphores in /dev/shm that belong to this process's user.

    With :func:`remove_orphans` they are the host-wide sweep: a batch job ended by its scheduler (Slurm's SIGKILL
    after ``KillWait`` reaches every process of the job, its resource trackers among them) leaves its workers'
    semaphores, and no reaper of a driver watches a job's tree. A user's semaphore that no live process maps is
    nobody's; another user's are not ours to judge (their processes' maps may be closed to us). Not seen: processes
    in another PID namespace that share this /dev/shm (a container started with the host's IPC namespace)."""
    uid = os.getuid()
    mine = set()
    for name in on_disk():
        try:
            if os.stat(os.path.join(procfs.SHM_DIR, name)).st_uid == uid:
                mine.add(name)
        except FileNotFoundError:
            pass
    return mine


def process_tree(root: int) -> list[int]:
    """``root`` and all its live descendants."""
    return [root, *procfs.descendants(root)]


def mapped_semaphores(pids: list[int] | None = None) -> set[str]:
    """Names of the multiprocessing semaphores mapped by these processes (all processes when None), by inode: the
    process that made one maps it under another name (see ``procfs.shm_inodes_mapped``)."""
    inodes = procfs.shm_inodes_mapped(pids)
    mapped = set()
    for name in on_disk():
        try:
            if os.stat(os.path.join(procfs.SHM_DIR, name)).st_ino in inodes:
                mapped.add(name)
        except FileNotFoundError:
            pass
    return mapped


def remove_orphans(names: set[str]) -> set[str]:
    """Unlink those of ``names`` that no live process maps any more; returns the names still there (in use)."""
    in_use = mapped_semaphores()
    for name in names - in_use:
        try:
            os.unlink(os.path.join(procfs.SHM_DIR, name))
        except FileNotFoundError:  # the resource tracker was faster
            pass
    return names & on_disk()
