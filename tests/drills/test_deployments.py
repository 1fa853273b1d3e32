"""Runs on clusters daskrl deploys the Dask way (``--deploy slurm``, ``--deploy ssh``) and on a ``SLURMCluster`` built
in Python, each on a real test cluster of this machine (daskrl/testing/hosts/): slurmctld, three slurmds and munged,
or three sshd hosts, each node in a network namespace of its own. What a user checks: CartPole is solved, the
components sit on several nodes, and when the run ends the queue is empty and nothing of it is left on the nodes.
A learner's job cancelled with scancel is a loss the run recovers from, and ``--deploy slurm --show`` prints the job
script and starts nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from daskrl import Observer
from daskrl.runtime.cleanup.segments import list_segments, owner_pid, pid_alive
from daskrl.runtime.memory.shm import host_of
from daskrl.testing.hosts.netns import pids_in
from daskrl.testing.hosts.slurm import SlurmTestCluster, slurm_unavailable
from daskrl.testing.hosts.ssh import SSHTestHosts, ssh_unavailable

from ..helpers import components_of, run_config, slow, wait_for

#: what every run here trains: CartPole until the mean return reaches 475, three worker processes
SOLVE = ["--env", "CartPole-v1", "--stop-at-return", "475", "--train-for-seconds", "150", "--dashboard-address", ""]


@pytest.fixture(scope="module")
def slurm():
    reason = slurm_unavailable()
    if reason:
        pytest.skip(reason)
    with SlurmTestCluster(nodes=3) as cluster:
        yield cluster
    assert not cluster.hosts.exists(), "the SLURM nodes' namespaces are left"


@pytest.fixture(scope="module")
def ssh():
    reason = ssh_unavailable()
    if reason:
        pytest.skip(reason)
    with SSHTestHosts(3) as hosts:
        yield hosts
    assert not hosts.hosts.exists(), "the SSH hosts' namespaces are left"


def train(args: list[str], tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    """``daskrl train ARGS`` as a user runs it; its exit status and output."""
    out = subprocess.run([sys.executable, "-m", "daskrl", "train", *args, "--train-dir", str(tmp_path),
                          "--experiment", "run"], capture_output=True, text=True, timeout=400,
                         env={**os.environ, **env}, cwd=tmp_path)
    return out.returncode, out.stdout + out.stderr


def hosts_used(output: str) -> int:
    """The hosts the run's components were on (the data-path line of its summary)."""
    return int(re.search(r"\((\d+) host\(s\)\)", output).group(1))


def left_on(hosts: list[str], daemons: list[int]) -> list[str]:
    """Processes in the test hosts other than the kit's own daemons (their names), once those ending have ended."""
    def left() -> list[str]:
        return sorted(f"{pid} {psutil.Process(pid).name()} ({psutil.Process(pid).status()})"
                      for pid in set(pids_in(hosts)) - set(daemons) if psutil.pid_exists(pid))
    with contextlib.suppress(AssertionError):  # (then the caller's assertion names them)
        wait_for(lambda: not left(), timeout=10, what="the run's processes on the test hosts to end")
    return left()


def segments() -> set[str]:
    """daskrl's shared-memory segments on this machine (the nodes share its /dev/shm) whose owner has exited: a
    live process's segments may be another test's, running beside this one."""
    return {name for name in list_segments() if not pid_alive(owner_pid(name) or 0)}


def jobqueue_settings(slurm: SlurmTestCluster) -> dict[str, str]:
    """Dask's configuration for the test cluster, as a user's jobqueue.yaml would hold it: the scheduler listens on
    the address the nodes reach (``jobqueue.slurm.scheduler-options``), the jobs' logs in the kit's folder."""
    return {"DASK_JOBQUEUE__SLURM__SCHEDULER_OPTIONS": repr({"host": slurm.scheduler_host}),
            "DASK_JOBQUEUE__SLURM__LOG_DIRECTORY": str(slurm.root / "jobs")}


@contextlib.contextmanager
def slurm_jobs(slurm: SlurmTestCluster, tmp_path: Path, jobs: int):
    """A ``SLURMCluster`` built in Python, as a user builds one, of ``jobs`` one-worker jobs on the test cluster, and
    a client once every job's worker is up; both closed after."""
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    cluster = SLURMCluster(cores=1, processes=1, memory="1GB", log_directory=str(tmp_path / "jobs"),
                           scheduler_options={"host": slurm.scheduler_host, "dashboard_address": ":0"})
    try:
        cluster.scale(jobs=jobs)
        client = Client(cluster, direct_to_workers=True)
        try:
            client.wait_for_workers(jobs, timeout=60)
            yield cluster, client
        finally:
            client.close()
    finally:
        cluster.close()


@slow("SLURM jobs: three dask workers started by sbatch on the test cluster's nodes, a CartPole run")
def test_deploy_slurm_solves_cartpole_on_jobs_over_several_nodes_and_cancels_them(slurm, tmp_path):
    daemons = [p.pid for p in slurm.daemons.procs.values()]
    before = segments()
    rc, out = train([*SOLVE, "--deploy", "slurm", "--jobs", "3"], tmp_path, jobqueue_settings(slurm))
    assert rc == 0, out
    assert "reached --stop-at-return 475" in out, out
    assert hosts_used(out) >= 2, out
    assert slurm.jobs_after_cleanup() == [], "the run's jobs are still in the queue"
    assert left_on(slurm.hosts.names, daemons) == [], "processes of the run are left on the nodes"
    assert segments() - before == set(), "shared memory is left"


@slow("SLURM jobs: a SLURMCluster built in Python, a CartPole run through daskrl.start")
def test_daskrl_start_trains_on_a_slurm_cluster_built_in_python(slurm, tmp_path, monkeypatch):
    import daskrl

    with slurm_jobs(slurm, tmp_path, 3) as (_, client):
        handle = daskrl.start(run_config(tmp_path, "py", env="CartPole-v1", stop_at_return=475.0,
                                         train_for_seconds=150.0), client=client)
        placed = {host_of(info["address"]) for info in components_of(client).values()}
        summary = handle.wait(timeout=240)
    assert len(placed) >= 2, placed
    assert summary["episode_return_mean"] >= 475, summary
    assert slurm.jobs_after_cleanup() == []


@slow("SSH: three sshd hosts, SSHCluster logging in to each with the test's key, a CartPole run")
def test_deploy_ssh_solves_cartpole_with_components_on_three_hosts(ssh, tmp_path):
    daemons = [p.pid for p in ssh.daemons.procs.values()]
    rc, out = train([*SOLVE, "--deploy", "ssh", "--hosts", *ssh.addresses], tmp_path, {"HOME": str(ssh.home)})
    assert rc == 0, out
    assert "reached --stop-at-return 475" in out, out
    assert hosts_used(out) == 3, out
    assert left_on(ssh.hosts.names, daemons) == [], "processes of the run are left on the hosts"


def test_deploy_slurm_show_prints_the_job_script_and_starts_nothing(tmp_path):
    pytest.importorskip("dask_jobqueue")
    rc, out = train(["--env", "CartPole-v1", "--deploy", "slurm", "--job-cores", "2", "--walltime", "00:20:00",
                     "--show"], tmp_path, {})
    assert rc == 0, out
    assert "2 job(s) of this script, 2 worker process(es) each, for a run of 3 worker processes" in out
    assert "#SBATCH -t 00:20:00" in out and "--nthreads 1" in out and "--nworkers 2" in out, out
    assert not (tmp_path / "run").exists()  # nothing started, nothing written


class StopOnceTheLearnerIsBack(Observer):
    """Stops the run once the learner, restarted after a loss, has published a few versions of its own."""

    def __init__(self) -> None:
        self.back_at: int | None = None  # the policy version when the restart was first seen

    def on_report(self, run, row) -> None:
        restarted = any(r["component"] == "learner" for r in run.care.recovery.recoveries)
        if restarted and self.back_at is None:
            self.back_at = row["policy_version"]
        if self.back_at is not None and row["policy_version"] >= self.back_at + 5:
            run.request_stop("the restarted learner trains")


@slow("SLURM jobs: a run on a SLURMCluster whose learner's job is cancelled with scancel halfway")
def test_a_cancelled_learner_job_is_a_loss_the_run_recovers_from_its_newest_checkpoint(slurm, tmp_path, capsys):
    """scancel: SIGTERM, then SIGKILL after KillWait; the learner's worker goes without notice (no lifetime), so its
    learner restarts from the newest checkpoint on a worker that stays, and trains on (the run is stopped once it
    published five versions: at the latest, it ends at its budget)."""
    import daskrl

    with slurm_jobs(slurm, tmp_path, 4) as (cluster, client):
        config = run_config(tmp_path, "cancel", env="CartPole-v1", num_workers=2, elastic=True,
                            train_for_seconds=60.0, train_for_env_steps=0, checkpoint_interval=3.0,
                            report_interval=0.5)
        handle = daskrl.start(config, client=client, observers=[StopOnceTheLearnerIsBack()])
        wait_for(lambda: list((tmp_path / "cancel" / "checkpoints").glob("checkpoint_*.pt")), timeout=60,
                 what="the run's first checkpoint")
        time.sleep(3)  # a few training steps past it
        job = learner_job(client, cluster)
        subprocess.run(["scancel", job], check=True, timeout=30)
        summary = handle.wait(timeout=180)  # raises if the run failed
    assert summary["stop_reason"] == "the restarted learner trains", summary["stop_reason"]
    learner = [r for r in summary["recoveries"] if r["component"] == "learner"]
    assert len(learner) == 1 and learner[0]["worker"], summary["recoveries"]
    assert "learner restarts from checkpoint_" in capsys.readouterr().out
    assert slurm.jobs_after_cleanup() == []


def learner_job(client, cluster) -> str:
    """The SLURM job whose worker runs the learner."""
    components = components_of(client)
    address = components["learner"]["address"]
    name = str(client.scheduler_info()["workers"][address]["name"])
    return cluster.workers[name].job_id
