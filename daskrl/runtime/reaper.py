"""A tiny process that outlives the driver of an embedded cluster to remove its shared memory.

When a driver is SIGKILLed, Dask ends its worker processes at once with ``os._exit``: nothing in them can
release the segments they own. This process, started in its own session by ``connect_cluster``, waits for the
driver to die, gives the workers a moment to go, removes the run's segments whose owners are dead, and exits.
After a normal close the driver has already swept and stops this process itself.

    python daskrl/runtime/reaper.py DRIVER_PID RUN_ID

It is started by path, not with ``-m``: then this folder is the first entry of ``sys.path``, ``segments`` (standard
library only) is imported on its own, and the package's imports (dask, numpy, gymnasium) are skipped; a reaper
costs about 13 MB and 0.03 s of CPU instead of 65 MB and 0.7 s at launch.
"""

from __future__ import annotations

import sys
import time

if __package__:
    from daskrl.runtime import segments
else:  # started by path (see above)
    import segments  # type: ignore[no-redef]


def main(driver_pid: int, run_id: str) -> None:
    while segments.pid_alive(driver_pid):
        time.sleep(1.0)
    for _ in range(10):  # workers die within a second or two of their driver
        time.sleep(1.0)
        segments.sweep(run_id, dead_only=True)
        if not segments.list_segments(run_id):
            return


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
