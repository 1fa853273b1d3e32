"""Deployments checked before anything starts: options that do not fit ``--deploy slurm`` or ``--deploy ssh`` are
refused in one line each, and the Kubernetes recipe (daskrl/driver/launch/deployment.py) builds the pod specs a run
needs: one single-threaded worker per rollout worker, and learner pods that declare the ``learner`` resource."""

from __future__ import annotations

import re

import pytest

from daskrl.config import Config
from daskrl.driver.launch.deployment import kubernetes_specs
from daskrl.errors import ConfigError


@pytest.mark.parametrize("flags, problem", [
    ({"deploy": "slurm", "scheduler": "tcp://10.0.0.1:8786"}, "--deploy slurm starts a cluster of its own"),
    ({"jobs": 3}, "--jobs shapes a --deploy slurm cluster"),
    ({"deploy": "ssh"}, "--deploy ssh needs --hosts"),
    ({"deploy": "slurm", "hosts": ["a"]}, "--hosts shapes a --deploy ssh cluster"),
    ({"show": True}, "--show prints what --deploy slurm or ssh would start"),
])
def test_deploy_options_that_do_not_fit_are_refused_in_one_line(flags, problem):
    with pytest.raises(ConfigError, match=re.escape(problem)):
        Config.from_flat({"env": "CartPole-v1", **flags}).validate()


def test_the_config_json_a_run_saved_is_a_valid_config_again():
    """A saved config names every option, the deploy flags at their defaults too: they are not flags given."""
    saved = Config.from_flat({"env": "CartPole-v1"}).to_json()
    Config.from_json(saved).validate()
    with pytest.raises(ConfigError, match="--jobs shapes a --deploy slurm cluster"):
        Config.from_json(saved.replace('"jobs": 0', '"jobs": 2')).validate()


def test_the_kubernetes_recipe_builds_the_cluster_spec_a_run_needs():
    pytest.importorskip("dask_kubernetes")
    import dask

    config = Config.from_flat({"env": "CartPole-v1", "num_workers": 8, "num_learners": 2})
    specs = kubernetes_specs(config, "registry.example.com/daskrl:latest", learner_cpu="4", learner_memory="8Gi")
    workers = specs["cluster"]["spec"]["worker"]
    container = workers["spec"]["containers"][0]
    assert workers["replicas"] == 8  # the rollout workers: one single-threaded worker each
    assert container["args"][:4] == ["dask", "worker", "--nthreads", "1"]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    learners = specs["learner"]
    learner = learners["spec"]["containers"][0]
    assert learners["replicas"] == 2 and learner["args"][:4] == ["dask", "worker", "--nthreads", "1"]
    assert learner["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}
    # the learners' pods declare the resource daskrl places its learners by, in the spelling Dask reads
    env = {item["name"]: item["value"] for item in learner["env"]}
    assert dask.config.collect_env(env) == {"distributed": {"worker": {"resources": {"learner": 1}}}}
