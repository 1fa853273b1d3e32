"""``--deploy slurm``: dask-jobqueue's ``SLURMCluster``, shaped by Dask's configuration (``jobqueue.slurm.*``: queue,
account, the job script's prologue, the scheduler's interface or host, a worker lifetime...) with the sizes a run
decides on top: jobs, cores per job (each core one single-threaded worker process, as daskrl's components want),
memory and walltime where the flags give them.
"""

from __future__ import annotations

import math
import signal
import subprocess
import threading
from typing import Any

import dask

from daskrl.errors import ConfigError

#: memory per core where neither --job-memory nor jobqueue.slurm.memory says: a learner and its batch fit in it
DEFAULT_MEMORY_PER_CORE_GB = 2


def _cluster_class() -> Any:
    """``SLURMCluster``. dask-jobqueue replaces the SIGINT handler when it is first imported (with one that exits at
    once), and that only works in the main thread: :func:`daskrl.runtime.deploy.prepare_deployment` imports it
    there first, and the handler the process had is put back."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise ConfigError(["--deploy slurm needs dask-jobqueue: pip install 'daskrl[slurm]'"]) from None
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, handler)
    return SLURMCluster


def prepare() -> None:
    _cluster_class()


def job_cores(spec: Any) -> int:
    return spec.job_cores or int(dask.config.get("jobqueue.slurm.cores", None) or 1)


def job_count(spec: Any) -> int:
    """--jobs, else as many jobs as the run's worker processes fill."""
    return spec.jobs or math.ceil(spec.workers / job_cores(spec))


def cluster_options(spec: Any) -> dict[str, Any]:
    """The arguments daskrl gives ``SLURMCluster`` (everything else comes from Dask's configuration)."""
    cores = job_cores(spec)
    memory = spec.job_memory or dask.config.get("jobqueue.slurm.memory", None) or \
        f"{DEFAULT_MEMORY_PER_CORE_GB * cores}GB"
    scheduler = dict(dask.config.get("jobqueue.slurm.scheduler-options", None) or {})
    scheduler.setdefault("dashboard_address", spec.dashboard_address)  # the configuration's own wins
    options = {"cores": cores, "processes": cores, "memory": memory, "scheduler_options": scheduler}
    if spec.walltime:
        options["walltime"] = spec.walltime
    return options


def start(spec: Any) -> Any:
    cluster = _cluster_class()(**cluster_options(spec))
    cluster.scale(jobs=job_count(spec))
    return cluster


def describe(spec: Any) -> str:
    cluster = _cluster_class()(**cluster_options(spec))  # a scheduler is started to fill in its address
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    return (f"# --deploy slurm: {job_count(spec)} job(s) of this script, {job_cores(spec)} worker process(es) each, "
            f"for a run of {spec.workers} worker processes\n{script}")


def pending(cluster: Any) -> str:
    """The run's jobs as ``squeue`` shows them, such as 'squeue: 2 PENDING (Resources), 1 RUNNING'."""
    ids = [job.job_id for job in cluster.workers.values() if getattr(job, "job_id", None)]
    if not ids:
        return "no job submitted yet"
    try:
        out = subprocess.run(["squeue", "--noheader", "--format", "%T %r", "--jobs", ",".join(ids)],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"squeue failed: {exc}"
    counts: dict[str, int] = {}
    for line in out.splitlines():
        state, _, reason = line.partition(" ")
        key = f"{state} ({reason})" if state == "PENDING" and reason else state
        counts[key] = counts.get(key, 0) + 1
    return "squeue: " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "none of its jobs queued")
