"""Frozen defaults stay frozen: the test tasks of an algorithm run once, with the defaults recorded in
benchmarks/learning_tasks.py (FROZEN), so a default that moves afterwards must fail here rather than leave
docs/training.md's test tables describing code that is gone (daskrl/config/defaults_fingerprint.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from daskrl.config import algo_options, defaults_fingerprint, env_defaults
from daskrl.config.defaults_fingerprint import fingerprint

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def learning_tasks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("learning_tasks", ROOT / "benchmarks" / "learning_tasks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["learning_tasks"] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["learning_tasks"]
    return module


def test_every_frozen_algorithm_still_has_the_defaults_its_test_tasks_ran_with(learning_tasks):
    for algo, frozen in learning_tasks.FROZEN.items():
        assert fingerprint(algo) == frozen.digest, (
            f"--algo {algo}'s defaults changed since they were frozen at {frozen.commit} for its test tasks "
            "(docs/training.md, 'Test tasks'). If the change is meant, the test tables are void: say so there, "
            "rerun the tuning, then freeze again with the new digest in benchmarks/learning_tasks.py")
        assert learning_tasks.frozen_problem(algo) is None


def test_an_algorithm_being_tuned_may_not_run_its_test_tasks(learning_tasks, monkeypatch):
    assert "td3" not in learning_tasks.FROZEN
    assert "not frozen yet" in learning_tasks.frozen_problem("td3")
    moved = dataclasses.replace(learning_tasks.FROZEN["appo"], digest="0" * 16)
    monkeypatch.setitem(learning_tasks.FROZEN, "appo", moved)
    assert "changed since they were frozen at 603337d" in learning_tasks.frozen_problem("appo")


def test_the_digest_moves_with_a_family_setting_a_rule_an_algorithm_default_and_a_global_default(monkeypatch):
    before = {algo: fingerprint(algo) for algo in ("appo", "sac")}
    mujoco = next(f for f in env_defaults.FAMILIES if f.name == "MuJoCo")
    monkeypatch.setitem(mujoco.options, "gamma", 0.99)
    assert fingerprint("appo") != before["appo"] and fingerprint("sac") == before["sac"]
    monkeypatch.undo()
    monkeypatch.setattr(env_defaults, "_FALLS_AT_ONCE", {**env_defaults._FALLS_AT_ONCE, "num_epochs": 4})
    assert fingerprint("appo") != before["appo"], "the falls-at-once rule's settings are not in the digest"
    monkeypatch.undo()
    monkeypatch.setitem(algo_options.ALGO_DEFAULTS["sac"], "learning_rate", 3e-4)
    assert fingerprint("sac") != before["sac"] and fingerprint("appo") == before["appo"]
    monkeypatch.undo()
    from daskrl.config.options import LearnerConfig

    @dataclasses.dataclass
    class LearnerWithAnotherGamma(LearnerConfig):
        gamma: float = 0.98

    monkeypatch.setitem(defaults_fingerprint.SECTIONS, "learner", LearnerWithAnotherGamma)
    assert all(fingerprint(algo) != before[algo] for algo in before), "the global defaults are not in the digest"
