"""Elastic sizing without a cluster: what ``--adapt MIN:MAX`` asks of an embedded cluster and how many rollout
workers an adaptive run starts with, for runs of several policies and remote inference too."""

from __future__ import annotations

import pytest

from daskrl.config import Config
from daskrl.driver.changes.elastic import adapt_range, adaptive_start
from daskrl.driver.fleet.placement import role_counts, workers_needed


@pytest.mark.parametrize("options", [
    {},
    {"num_policies": 2},
    {"num_policies": 3, "inference": "remote", "num_inference_workers": 1},
    {"num_policies": 2, "num_learners": 2},
])
def test_adapt_counts_every_policys_learners_and_inference_workers(options):
    """``placement.role_counts`` gives each policy its learners and inference workers; --adapt's MIN must hold them
    all and one rollout worker, and the run it starts must fit in MIN."""
    config = Config.from_flat({"env": "CartPole-v1", "adapt": "1:16", **options})
    counts = role_counts(config)
    low, high = adapt_range(config)
    assert low == counts["learner"] + counts["inference"] + 1 and high == 16
    started = adaptive_start(config)
    assert started.sampler.num_workers == 1 and workers_needed(started) == low
    wider = Config.from_flat({"env": "CartPole-v1", "adapt": f"{low + 2}:16", **options})
    assert workers_needed(adaptive_start(wider)) == low + 2  # MIN workers, all busy: two more rollout workers
