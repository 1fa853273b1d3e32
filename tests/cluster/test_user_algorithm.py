"""An algorithm from a user's own package (tests/algopkg/daskrl_test_a2c: A2C), registered by importing it: it
trains CartPole on the embedded cluster through daskrl's on-policy learner, with its own trainer built on the
learner's worker, while no line of daskrl names it; a name that is taken, or a data source daskrl has no learner
for, is refused."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

import daskrl
from daskrl.config import Config, ConfigError
from daskrl.config.algo_options import ALGO_SOURCES
from daskrl.driver.fleet.algorithms import ALGORITHMS

from ..helpers import SMALL_CARTPOLE, run_config, slow

PKG_DIR = Path(__file__).resolve().parents[1] / "algopkg"


@pytest.fixture
def a2c(monkeypatch):
    """The package importable (on the workers too: they start with this sys.path) and imported; its registration is
    undone afterwards, so no other test sees a fourth algorithm."""
    monkeypatch.syspath_prepend(str(PKG_DIR))
    import daskrl_test_a2c

    yield daskrl_test_a2c.A2C
    ALGORITHMS.pop("a2c", None)
    ALGO_SOURCES.pop("a2c", None)
    for name in [m for m in sys.modules if m.startswith("daskrl_test_a2c")]:
        del sys.modules[name]


def test_an_unregistered_algorithm_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="--algo must be one of appo, dqn, sac, td3, bc, iql, cql, got 'a2c'"):
        Config.from_flat({"algo": "a2c"}).validate()


@slow("an A2C run of 20,000 CartPole steps on the embedded cluster")
def test_a_registered_algorithm_trains_through_daskrls_learner(a2c, tmp_path):
    config = run_config(tmp_path, "a2c", base=SMALL_CARTPOLE, algo="a2c", learning_rate=1e-3,
                        train_for_env_steps=20_000)
    summary = daskrl.train(config)
    assert summary["env_steps"] >= 20_000 and summary["policy_version"] > 10, summary
    # it learns: a uniformly random CartPole policy averages about 22
    assert summary["episode_return_mean"] > 40, summary["episode_return_mean"]
    [checkpoint] = sorted((tmp_path / "a2c" / "checkpoints").glob("*.pt"))[-1:]
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["train_steps"] > 10, state["train_steps"]
    # the trainer that wrote it is A2C's: RMSprop keeps a running square average of each gradient, Adam does not
    assert all("square_avg" in s for s in state["optimizer"]["state"].values()), state["optimizer"]["state"].keys()


def test_a_taken_name_or_an_unknown_data_source_is_refused(a2c):
    daskrl.register_algorithm(a2c)  # the same record again: nothing changes
    with pytest.raises(ValueError, match="an algorithm named 'appo' is registered already"):
        daskrl.register_algorithm(dataclasses.replace(a2c, name="appo"))
    with pytest.raises(ValueError, match="data_source must be one of fresh slots, replay"):
        daskrl.register_algorithm(dataclasses.replace(a2c, name="a2c_offline", data_source="a dataset"))
    Config.from_flat({"algo": "a2c"}).validate()  # one of --algo's choices now
