"""The embedded cluster's worker server: a forkserver that imports daskrl's worker modules and torch once, which
the workers are forked from.

Why a module of its own, importing only the standard library: the server's imports (about 1.3 s, torch most of it)
are on the path to a run's first training step, so the ``daskrl`` command starts the server before it imports
anything else (:mod:`daskrl.__main__`), and they run on the other core while this process imports the rest.
:func:`daskrl.runtime.access.cluster.connect_cluster` starts it too where nobody did (the Python API).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading

#: what the workers need, imported once in the server and shared by the forked workers (not torch._dynamo, 0.7 s
#: more than torch: the learner's optimizers do without it, daskrl/algo/kernels/eager_optim.py). The component modules import
#: torch where they configure, so the torch-side ones are listed too. preload_start comes first (the garbage
#: collector paused for the imports) and preload_done last (everything imported moved out of the collector's reach,
#: and the collector running again): see their docstrings.
WORKER_MODULES = ["daskrl.runtime.workers.preload_start", "distributed", "torch", "daskrl.runtime",
                  "daskrl.learning.learner", "daskrl.sampling.rollout_worker", "daskrl.sampling.inference_worker",
                  "daskrl.algo.appo.trainer", "daskrl.learning.group.group_member", "daskrl.learning.snapshots",
                  "daskrl.learning.training_state", "daskrl.models.actor_critic", "daskrl.sampling.policies.policy",
                  "daskrl.runtime.workers.preload_done"]

_starting: threading.Thread | None = None
_used = False  # a cluster forks its workers from the server: it stays as long as this process does


def refuse_a_run_while_a_worker_imports_the_script() -> None:
    """End a worker process that is importing the user's script to start a run: every worker process the spawn and
    forkserver start methods make imports the main script again (as ``__mp_main__``), so a script that starts a run
    at its top level, not under ``if __name__ == "__main__":``, would start it again in each worker (where
    multiprocessing refuses with a page of tracebacks). One line, then the worker exits; the script's own process
    learns of it as workers that did not start (:func:`daskrl.runtime.access.cluster.connect_cluster`)."""
    importing = sys.modules.get("__mp_main__")
    if importing is not None and importing is not sys.modules.get("__main__"):
        raise SystemExit(f"daskrl: a worker process imported {getattr(importing, '__file__', 'the script')} again, "
                         f"and it starts a run there: {MAIN_GUARD}")


#: how a script that starts a run should be written, as Dask and multiprocessing ask
MAIN_GUARD = 'start it under `if __name__ == "__main__":` (every worker process imports the script again)'


def available() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods()


def start() -> None:
    """Start the server in the background (once per process; later calls do nothing)."""
    global _starting
    if _starting is not None or not available():
        return
    from multiprocessing import forkserver

    # Workers inherit the server's OpenMP state: if torch there starts a thread pool, a forked worker's
    # torch.set_num_threads(1) no longer helps and every op spins on contended cores (inference then took nearly
    # all of a rollout worker's time, and sampling ran about 60 times slower). One busy component per core
    # wants one intra-op thread anyway; the learner raises its own count with torch.set_num_threads.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    multiprocessing.get_context("forkserver").set_forkserver_preload(WORKER_MODULES)
    _starting = threading.Thread(target=forkserver.ensure_running, name="daskrl-forkserver", daemon=True)
    _starting.start()


def use() -> None:
    """A cluster forks its workers from the server from now on (their nannies learn of a worker's exit through the
    server): :func:`stop` leaves it running."""
    global _used
    _used = True


def stop() -> None:
    """Stop a server this process started and no cluster used, at once (it may still be importing: a command that
    ended early, a run on an existing cluster after all)."""
    global _starting
    if _starting is None or _used:
        return
    _starting.join()
    _starting = None
    pid = forkserver_pid()
    if pid is not None:
        end_forkserver(pid)


# ---- the only private parts of multiprocessing daskrl touches (the public API starts a server, never stops one);
# ---- tests/drills/test_startup.py checks them against the running Python, as tests/cluster/test_dask_internals.py
# ---- does Dask's


def forkserver_pid() -> int | None:
    """The pid of this process's forkserver (``forkserver._forkserver._forkserver_pid``); None before it started."""
    from multiprocessing import forkserver

    return forkserver._forkserver._forkserver_pid


def end_forkserver(pid: int) -> None:
    """End the forkserver at once, even mid-import (SIGTERM: it ends only at its imports' end otherwise, when it sees
    its pipe closed), then close its pipe and reap it (``forkserver._forkserver._stop``)."""
    from multiprocessing import forkserver

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    forkserver._forkserver._stop()
