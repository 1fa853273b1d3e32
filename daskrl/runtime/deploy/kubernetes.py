"""Kubernetes, through the Dask operator (dask-kubernetes' ``KubeCluster``): the cluster spec a run needs, made with
``make_cluster_spec`` and ``make_worker_spec``. Nothing here starts pods: this project has no Kubernetes cluster to
run one on (docs/deployment.md says so); a test checks the specs it builds.

What a run needs of the pods: one single-threaded Dask worker per component (``dask worker --nthreads 1``), the
rollout workers in the default worker group, the learners in a group of their own whose workers declare the
``learner`` resource (daskrl places its learners there), each with the CPU and memory requests given.
"""

from __future__ import annotations

from typing import Any

from daskrl.errors import ConfigError

#: what every worker pod runs: one thread per worker process, as daskrl's components want
ONE_THREAD = ["dask", "worker", "--nthreads", "1"]
#: the environment that makes a worker one the learners are placed on (Dask reads worker resources from it)
LEARNER_RESOURCE_ENV = {"DASK_DISTRIBUTED__WORKER__RESOURCES__LEARNER": "1"}


def _requests(cpu: str, memory: str) -> dict[str, dict[str, str]]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


def cluster_specs(name: str, image: str, workers: int, learners: int, worker_cpu: str = "1",
                  worker_memory: str = "2Gi", learner_cpu: str = "4", learner_memory: str = "8Gi",
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """``{"cluster": ..., "learner": ...}``: ``KubeCluster(custom_cluster_spec=specs["cluster"])``, then
    ``cluster.add_worker_group("learner", custom_spec=specs["learner"])``."""
    try:
        from dask_kubernetes.operator import make_cluster_spec, make_worker_spec
    except ImportError:
        raise ConfigError(["the Kubernetes specs need dask-kubernetes: pip install 'daskrl[kubernetes]'"]) from None
    env = dict(env or {})
    cluster = make_cluster_spec(name=name, image=image, n_workers=workers, worker_command=ONE_THREAD,
                                resources=_requests(worker_cpu, worker_memory), env=env or None)
    learner = make_worker_spec(image=image, n_workers=learners, worker_command=ONE_THREAD,
                               resources=_requests(learner_cpu, learner_memory), env={**env, **LEARNER_RESOURCE_ENV})
    return {"cluster": cluster, "learner": learner}
