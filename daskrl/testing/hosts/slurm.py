"""A real SLURM cluster on this machine, for tests and benchmarks: Debian's ``slurm-wlm`` and ``munge``, started from
files in a temporary folder (no systemd), one ``slurmd`` per node, each in its own network namespace (Slurm's
``NodeAddr``) and UTS namespace (slurmd finds its node by hostname, so several slurmds on one machine need no
multiple-slurmd build), ``slurmctld`` on this machine's address on the nodes' bridge.

    with SlurmTestCluster(nodes=3) as slurm:      # sbatch, squeue, scancel and dask-jobqueue find it (SLURM_CONF)
        cluster = SLURMCluster(cores=1, memory="1GB", scheduler_options={"host": slurm.scheduler_host})

Jobs run as root in their node's namespaces, with this machine's files and Python. ``KillWait`` is short (5 s by
default): a cancelled or timed-out job gets SIGTERM, then SIGKILL 5 s later, as on a real cluster only sooner.
:meth:`stop` cancels every job, stops the daemons by pid and deletes the namespaces: nothing is left, whatever the
test did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from daskrl.testing.hosts.daemons import Daemons, wait_until
from daskrl.testing.hosts.netns import NamespaceHosts, netns_unavailable

#: what the kit runs, from Debian's slurm-wlm and munge
NEEDED = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "unshare")


def slurm_unavailable() -> str:
    """Why this machine cannot run the SLURM test cluster ('' when it can)."""
    missing = [cmd for cmd in NEEDED if shutil.which(cmd) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)"
    return netns_unavailable()


class SlurmTestCluster:
    """``nodes`` nodes named ``n1``..``nN`` with ``cpus`` CPUs each, partition ``debug``."""

    def __init__(self, nodes: int = 3, cpus: int = 2, memory_mb: int = 4000, kill_wait_s: int = 5) -> None:
        self.hosts = NamespaceHosts("sl", nodes, octet=78)
        self.cpus, self.memory_mb, self.kill_wait_s = cpus, memory_mb, kill_wait_s
        self.root = Path(tempfile.mkdtemp(prefix="daskrl_slurm_"))
        self.daemons = Daemons(self.root)
        self._env_before: str | None = None

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.hosts.count + 1)]

    @property
    def scheduler_host(self) -> str:
        """The address a Dask scheduler on this machine listens on so that jobs on every node reach it."""
        return self.hosts.driver_address

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self) -> dict[str, str]:
        """What Slurm's commands need to find this cluster (also set in ``os.environ`` while it runs)."""
        return {"SLURM_CONF": str(self.conf)}

    # ---- start and stop ----

    def start(self) -> SlurmTestCluster:
        try:
            self.hosts.up()
            self._start_munge()
            self._write_config()
            self.daemons.start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)], hostname="ctl")
            for ns, node in zip(self.hosts.names, self.node_names, strict=True):
                self.daemons.start(f"slurmd.{node}", ["slurmd", "-D", "-f", str(self.conf)], netns=ns, hostname=node)
            self._env_before = os.environ.get("SLURM_CONF")
            os.environ.update(self.env())
            wait_until(self._all_idle, 60, f"the {self.hosts.count} SLURM nodes did not come up:\n"
                       + self.daemons.log("slurmctld")[-2000:])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Cancel every job, stop the daemons, delete the nodes' namespaces and the folder (idempotent)."""
        if self.daemons.alive("slurmctld"):
            self._run("scancel", "--user", "root", check=False)
            try:
                wait_until(lambda: not self.jobs(), self.kill_wait_s + 15, "jobs still in the queue")
            except (TimeoutError, subprocess.SubprocessError):
                pass  # the daemons' end below ends their steps too
        self.daemons.stop()
        self.hosts.down()
        if self._env_before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = self._env_before
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SlurmTestCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- what tests ask ----

    def jobs(self) -> list[dict[str, str]]:
        """The queue: ``{"id", "name", "state", "nodes"}`` per job (``squeue``)."""
        out = self._run("squeue", "--noheader", "--format", "%i|%j|%T|%N").stdout
        return [dict(zip(("id", "name", "state", "nodes"), line.split("|"), strict=True))
                for line in out.splitlines() if line.strip()]

    def jobs_after_cleanup(self) -> list[dict[str, str]]:
        """The queue once cancelled jobs have finished completing: a job scancel'ed a moment ago stays in the
        queue as COMPLETING until its node has killed its processes (up to KillWait), so a test that asks
        "did the run leave jobs behind?" waits that long before it looks."""
        try:
            wait_until(lambda: all(job["state"] != "COMPLETING" for job in self.jobs()), self.kill_wait_s + 15,
                       "jobs still completing")
        except TimeoutError:
            pass  # the queue below says which
        return self.jobs()

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=check,
                              env={**os.environ, **self.env()})

    def _all_idle(self) -> bool:
        out = self._run("sinfo", "--noheader", "--Node", "--format", "%N %t", check=False).stdout
        states = dict(line.split() for line in out.splitlines() if line.strip())
        return all(states.get(node) == "idle" for node in self.node_names)

    # ---- files ----

    def _start_munge(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.daemons.start("munged", ["munged", "-F", "--force", f"--key-file={key}",
                                      f"--socket={self.root / 'munge.sock'}", f"--pid-file={self.root / 'munged.pid'}",
                                      f"--seed-file={self.root / 'munge.seed'}", f"--log-file={self.root / 'munged.log'}"])
        wait_until((self.root / "munge.sock").exists, 10, "munged did not open its socket")

    def _write_config(self) -> None:
        (self.root / "state").mkdir()
        nodes = "\n".join(f"NodeName={node} NodeAddr={address} CPUs={self.cpus} RealMemory={self.memory_mb}"
                          for node, address in zip(self.node_names, self.hosts.addresses, strict=True))
        self.conf.write_text(SLURM_CONF.format(root=self.root, controller=self.scheduler_host,
                                               kill_wait=self.kill_wait_s, nodes=nodes))
        # slurmd sets up its cgroup plugin even with proctrack/linuxproc; say which hierarchy this machine mounts
        v2 = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout.strip()
        (self.root / "cgroup.conf").write_text(
            f"CgroupPlugin=cgroup/{'v2' if v2 == 'cgroup2fs' else 'v1'}\nCgroupMountpoint=/sys/fs/cgroup\n")


#: one controller (hostname ``ctl``, in this machine's network namespace), the nodes, one partition; no accounting,
#: no cgroup tracking (proctrack/linuxproc), short timeouts so that a test sees the end of a job in seconds
SLURM_CONF = """\
ClusterName=daskrltest
SlurmctldHost=ctl({controller})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool_%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd_%n.pid
SlurmctldLogFile={root}/slurmctld_file.log
SlurmdLogFile={root}/slurmd_%n_file.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
KillWait={kill_wait}
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=5
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
