"""A tiny process that outlives the driver of an embedded cluster to remove its shared memory.

When a driver is SIGKILLed, Dask ends its worker processes at once with ``os._exit``: nothing in them can
release the segments they own. This process, started in its own session by ``connect_cluster``, waits for the
driver to die, gives the workers a moment to go, removes the segments whose owners are dead, and exits: the
run's own, and those of every run the driver started on that cluster (``daskrl.start`` from a notebook gives each
run an id of its own; a dead owner's segment is nobody's).
While the driver lives it also notes the multiprocessing semaphores its process tree maps, and removes them
afterwards if nothing maps them any more (see ``semaphores``: a kill of the whole process group leaks them).
After a normal close the driver has already swept and stops this process itself.

    python daskrl/runtime/cleanup/reaper.py DRIVER_PID RUN_ID

It is started by path, not with ``-m``: then this folder is the first entry of ``sys.path``, ``segments`` (standard
library and psutil only) is imported on its own, and the package's imports (dask, numpy, gymnasium) are skipped; a
reaper costs about 16 MB and 0.07 s of CPU instead of 65 MB and 0.7 s at launch.
"""

from __future__ import annotations

import sys
import time

if __package__:
    from daskrl.runtime.cleanup import segments, semaphores
else:  # started by path (see above)
    import segments  # type: ignore[no-redef]
    import semaphores  # type: ignore[no-redef]

SEMAPHORE_SCAN_EVERY = 5  # seconds, after the first 15 (when Dask's workers start and create theirs) scanned each second


def _scan_now(waited: int) -> bool:
    return waited < 15 or waited % SEMAPHORE_SCAN_EVERY == 0


def main(driver_pid: int, run_id: str) -> None:
    held: set[str] = set()
    waited = 0
    while segments.pid_alive(driver_pid):
        if _scan_now(waited):
            held |= semaphores.mapped_semaphores(semaphores.process_tree(driver_pid))
        time.sleep(1.0)
        waited += 1
    for _ in range(10):  # workers die within a second or two of their driver
        time.sleep(1.0)
        segments.sweep(None, dead_only=True)
        held = semaphores.remove_orphans(held)
        if not segments.list_segments(run_id) and not held:
            return


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
