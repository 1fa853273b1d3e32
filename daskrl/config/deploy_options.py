"""The options of ``--deploy``: where a run's Dask cluster comes from when it is neither the embedded
``LocalCluster`` nor a running scheduler (``--scheduler``). Kept beside the other sections (they share one flat
namespace: see :mod:`.options`); how each deployment is built is daskrl/runtime/deploy/.

A deployment is built the way Dask users already build one: dask-jobqueue's ``SLURMCluster`` reads its shape from
Dask's configuration (``jobqueue.yaml``: queue, account, cores, memory, walltime, the job script's prologue, the
scheduler's interface), and these flags only override what a run must decide (how many jobs, their size, their
walltime); ``distributed.SSHCluster`` logs in to ``--hosts`` with the user's SSH setup.
"""

from __future__ import annotations

from dataclasses import dataclass

from daskrl.config.fields import Section, opt

#: values of --deploy
DEPLOYMENTS = ("local", "slurm", "ssh")


@dataclass
class DeployConfig(Section):
    deploy: str = opt("local", "where the run's Dask cluster comes from: 'local' (the embedded LocalCluster, or "
                               "--scheduler's), 'slurm' (dask-jobqueue's SLURMCluster, shaped by Dask's jobqueue "
                               "configuration and the --job-* flags; its jobs start for this run and are cancelled "
                               "at its end) or 'ssh' (distributed's SSHCluster on --hosts)", choices=list(DEPLOYMENTS))
    jobs: int = opt(0, "--deploy slurm: batch jobs to start (0: as many as the run's worker processes need, "
                       "--job-cores per job)", low=0, high=4096)
    job_cores: int = opt(0, "--deploy slurm: cores per job, each one single-threaded Dask worker process (0: "
                            "jobqueue.slurm.cores of Dask's configuration, else 1)", low=0, high=4096)
    job_memory: str = opt("", "--deploy slurm: memory per job, such as 8GB ('': jobqueue.slurm.memory of Dask's "
                              "configuration, else 2GB per core)", pattern=r"\d+(\.\d+)?\s*([KMGT]i?B)?",
                          pattern_help="a size such as 8GB or 16GiB")
    walltime: str = opt("", "--deploy slurm: each job's walltime, such as 04:00:00 ('': jobqueue.slurm.walltime "
                            "of Dask's configuration)", pattern=r"(\d+-)?\d{1,3}(:\d{2}){0,2}",
                        pattern_help="SLURM's [days-]hours:minutes:seconds, such as 04:00:00 or 1-00:00:00")
    hosts: list[str] = opt([], "--deploy ssh: the hosts to run on, as SSH reaches them (user@host works); the "
                               "first also runs the scheduler, and the run's worker processes are spread over all "
                               "of them")
    show: bool = opt(False, "with --deploy: print what would be started (the SLURM job script, the SSH hosts' "
                            "workers) and exit without starting it")


#: each deployment's own flags (a flag given for another deployment is refused: it would be ignored)
_OWN_FLAGS = {"slurm": ("jobs", "job_cores", "job_memory", "walltime"), "ssh": ("hosts",)}


def deploy_problems(deploy: DeployConfig, scheduler: str, serial: bool) -> list[str]:
    """``--deploy`` against the options it cannot go with, one line each."""
    out = []
    given = deploy.changed()
    for kind, flags in _OWN_FLAGS.items():
        stray = [f"--{f.replace('_', '-')}" for f in flags if f in given and deploy.deploy != kind]
        if stray:
            out.append(f"{', '.join(stray)} shape{'s' if len(stray) == 1 else ''} a --deploy {kind} cluster, and "
                       f"this run's --deploy is {deploy.deploy}: add --deploy {kind} or leave "
                       f"{'it' if len(stray) == 1 else 'them'} out")
    if deploy.deploy == "local":
        if deploy.show:
            out.append("--show prints what --deploy slurm or ssh would start: add one of them")
        return out
    if scheduler:
        out.append(f"--deploy {deploy.deploy} starts a cluster of its own, and --scheduler names a running one: "
                   "leave one of them out")
    if serial:
        out.append(f"--serial runs the workers as threads of this process: leave out --deploy {deploy.deploy}")
    if deploy.deploy == "ssh" and not deploy.hosts:
        out.append("--deploy ssh needs --hosts: the machines to run on, such as --hosts node1 node2 node3")
    return out
