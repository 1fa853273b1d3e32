"""What a process tree killed whole leaves on a host, and who removes it: a batch job's end (Slurm's SIGKILL after
``KillWait`` reaches every process of the job, Python's resource tracker among them) leaves the multiprocessing
semaphores of its ``dask worker``s in /dev/shm, and the next worker daskrl sets up on that host removes them
(daskrl/runtime/cleanup/semaphores.py, daskrl/runtime/workers/worker_plugin.py)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys

from daskrl.runtime import connect_cluster
from daskrl.runtime.cleanup.semaphores import on_disk

#: a job's worker in small: a spawn-context lock is a named semaphore that Python's resource tracker would unlink
MAKES_A_SEMAPHORE = ("import multiprocessing, time\n"
                     "lock = multiprocessing.get_context('spawn').Lock()\n"
                     "print(lock._semlock.name, flush=True)\n"
                     "time.sleep(120)\n")


def disk_name(semlock_name: str) -> str:
    return "sem." + semlock_name.lstrip("/")


def test_a_worker_that_starts_removes_the_semaphores_of_a_tree_killed_whole_and_keeps_live_ones():
    held_here = multiprocessing.get_context("spawn").Lock()  # mapped by this live process: not an orphan
    live = disk_name(held_here._semlock.name)
    job = subprocess.Popen([sys.executable, "-c", MAKES_A_SEMAPHORE], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        orphan = disk_name(job.stdout.readline().strip())
        assert orphan in on_disk()
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the whole tree, resource tracker included, as a job's end does
        job.wait(timeout=10)
        job.stdout.close()
    assert orphan in on_disk(), "the killed tree's tracker removed it: nothing left to test"
    cluster = connect_cluster(n_workers=1, processes=False, dashboard_address=None, preload_torch=False)
    try:
        left = on_disk()
    finally:
        cluster.close()
    assert orphan not in left, "the worker's setup left the killed tree's semaphore"
    assert live in left, "the worker's setup removed a semaphore a live process maps"
