"""The cluster a run deploys for itself (``--deploy slurm|ssh``): what it asks of it, from the run's options. The
deployments themselves are daskrl/runtime/deploy/."""

from __future__ import annotations

from daskrl.config import Config
from daskrl.driver.changes.fleet_sizing import FleetSizing
from daskrl.driver.fleet.placement import workers_needed
from daskrl.runtime.deploy import DeploySpec

#: seconds a deployment's jobs or hosts get to bring up the workers a run starts with (--wait-for-workers: longer)
DEFAULT_WAIT_S = 600.0


def deploy_spec(config: Config, sizing: FleetSizing) -> DeploySpec:
    """``--deploy``'s cluster for this run: as many worker processes as it uses, and the ones it cannot start
    without (all of them, unless the run is elastic and grows into the rest as jobs start: ``sizing``)."""
    d = config.deploy
    return DeploySpec(kind=d.deploy, workers=workers_needed(config), start_with=sizing.start_with(config),
                      jobs=d.jobs, job_cores=d.job_cores, job_memory=d.job_memory, walltime=d.walltime,
                      hosts=tuple(d.hosts), dashboard_address=config.run.dashboard_address or ":0",
                      wait_s=config.run.wait_for_workers or DEFAULT_WAIT_S)


def kubernetes_specs(config: Config, image: str, **sizes: str) -> dict:
    """The Dask operator's cluster spec for this run (daskrl/runtime/deploy/kubernetes.py): as many single-threaded
    workers as its rollout and inference workers, and its learners in a worker group of their own. ``sizes``:
    ``worker_cpu``, ``worker_memory``, ``learner_cpu``, ``learner_memory`` (Kubernetes quantities)."""
    from daskrl.runtime.deploy.kubernetes import cluster_specs

    learners = config.learner.num_learners * config.policies.num_policies
    return cluster_specs(config.run.experiment or "daskrl", image, workers=workers_needed(config) - learners,
                         learners=learners, **sizes)
