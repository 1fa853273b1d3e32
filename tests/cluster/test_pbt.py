"""Population-based training: an exploit copies a policy's whole training state (weights, Adam moments and step,
normalizers) and nothing is shared afterwards; the trainer's mutable hyperparameters change what it does and survive
checkpoints; mutations stay in their ranges; a round's ranking rules; the PBT log; and the learner and controller
components on a real (in-process) cluster."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import random
from itertools import count

import numpy as np
import pytest
import torch

import daskrl.algo.appo.trainer as trainer_module
import daskrl.algo.kernels.mlp_gradients as mlp_gradients
from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.config import AlgoConfig, Config, LearnerConfig, ModelConfig
from daskrl.config.hyperparams import MUTABLE
from daskrl.envs import probe_env
from daskrl.learning.learner import Learner
from daskrl.learning.training_state import export_state, import_state
from daskrl.models.actor_critic import build_model
from daskrl.models.registry import pack_components
from daskrl.pbt.controller import PBTController, exploits_of, pbt_setup
from daskrl.pbt.population import Exploit, PBTLog, PBTRanges, PBTRound, mutate, perturb, spread
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.handles import spawn
from daskrl.runtime.memory import shm
from daskrl.setups import LearnerSetup

T, N = 16, 8
HP = {"learning_rate": 1e-3, "entropy_coef": 0.01, "clip_ratio": 0.2, "gamma": 0.99}
_ids = count()


@pytest.fixture(scope="module")
def spaces():
    return probe_env("CartPole-v1")


def make_trainer(spaces, seed: int = 0, model: ModelConfig | None = None, **learner) -> APPOTrainer:
    net = build_model(spaces, model or ModelConfig(), seed=seed)  # normalize_obs on: observation statistics too
    cfg = dataclasses.replace(LearnerConfig(), batch_size=64, num_epochs=2, **learner)
    return APPOTrainer(net, cfg, 0)


def make_batch(spaces, seed: int) -> TrajectoryBatch:
    rng = np.random.default_rng(seed)
    return TrajectoryBatch(
        obs=rng.normal(seed % 3, 1 + seed % 2, size=(T + 1, N, *spaces.obs_shape)).astype(np.float32),
        actions=rng.integers(0, 2, size=(T, N)).astype(spaces.action_dtype),
        rewards=rng.normal(1.0, 1.0, size=(T, N)).astype(np.float32),
        dones=rng.random((T, N)) < 0.05,
        log_probs=np.full((T, N), math.log(0.5), np.float32),
        policy_version=np.zeros((T, N), np.int32),
    )


def trained(spaces, seed: int, steps: int = 2, **learner) -> APPOTrainer:
    trainer = make_trainer(spaces, seed=seed, **learner)
    for step in range(steps):
        trainer.train(make_batch(spaces, seed * 10 + step), 0)
    return trainer


def tensors(obj, prefix: str = "") -> dict[str, object]:
    """Every leaf of a (nested) state dict by path: tensors, arrays and numbers."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else None
    if items is None:
        return {prefix: obj}
    return {path: leaf for k, v in items for path, leaf in tensors(v, f"{prefix}/{k}").items()}


def assert_same_state(a: dict, b: dict, skip: tuple[str, ...] = ()) -> None:
    la, lb = tensors(a), tensors(b)
    keep = [k for k in la if not k.startswith(skip)]
    assert sorted(keep) == sorted(k for k in lb if not k.startswith(skip))
    for key in keep:
        x, y = la[key], lb[key]
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), key
        else:
            assert np.array_equal(np.asarray(x), np.asarray(y)), key


def state_differs(a: dict, b: dict) -> bool:
    la, lb = tensors(a), tensors(b)
    return any(isinstance(la[k], torch.Tensor) and not torch.equal(la[k], lb[k]) for k in la)


COUNTERS = ("/train_steps", "/samples_trained", "/hyperparams", "/policy_version")


# ---- an exploit copies the whole training state ----


def test_an_exploit_copies_weights_adam_state_and_normalizers_exactly(spaces):
    source, target = trained(spaces, seed=1), trained(spaces, seed=2, steps=3)
    assert state_differs(source.state_dict(), target.state_dict())
    exported = export_state(source, version=7)
    assert exported["policy_version"] == 7
    assert_same_state(exported, source.state_dict(), skip=("/policy_version",))

    import_state(target, exported, {**HP, "learning_rate": 3e-4})

    after = target.state_dict()
    assert_same_state(after, source.state_dict(), skip=COUNTERS)
    adam = after["optimizer"]["state"]
    assert adam and all(int(s["step"]) == source.optimizer.state_dict()["state"][i]["step"] for i, s in adam.items())
    assert np.array_equal(target.obs_rms.mean, source.obs_rms.mean)
    assert target.obs_rms.count == source.obs_rms.count and target.returns.stats.count == source.returns.stats.count
    torch.testing.assert_close(target.model.obs_mean, source.model.obs_mean, rtol=0, atol=0)  # what samplers get
    # its own counters go on (its env steps, its step count); the hyperparameters are the new ones
    assert (target.train_steps, target.samples_trained) == (3, 3 * T * N)
    assert target.hyperparams() == {**HP, "learning_rate": 3e-4}


def test_after_an_exploit_the_target_trains_as_the_source_would(spaces):
    """The copy is complete: with the source's hyperparameters, the same batch and the same minibatch order, the
    target's next step gives the source's weights bit for bit (a missing Adam moment or statistic would not)."""
    source, target = trained(spaces, seed=1), trained(spaces, seed=2)
    import_state(target, export_state(source, 0), source.hyperparams())
    batch = make_batch(spaces, 99)
    for trainer in (source, target):
        torch.manual_seed(5)
        trainer.train(batch, 0)
    assert_same_state(target.state_dict(), source.state_dict(), skip=COUNTERS)


def test_an_imported_state_shares_no_tensor_with_the_source_or_another_target(spaces):
    source, first, second = trained(spaces, seed=1), trained(spaces, seed=2), trained(spaces, seed=3)
    exported = export_state(source, 0)
    import_state(first, exported, HP)  # the same export twice, as two worst policies copying one best
    import_state(second, exported, HP)
    kept_first, kept_second = export_state(first, 0), export_state(second, 0)
    source.train(make_batch(spaces, 50), 0)
    first.train(make_batch(spaces, 51), 0)
    assert_same_state(export_state(second, 0), kept_second)
    assert state_differs(export_state(first, 0), kept_first)


def test_a_failed_import_changes_nothing(spaces):
    target = trained(spaces, seed=2)
    before = export_state(target, 0)
    with pytest.raises(ValueError, match="gamma"):
        import_state(target, export_state(trained(spaces, seed=1), 0), {**HP, "gamma": 1.5})
    other = make_trainer(spaces, seed=1, model=ModelConfig(hidden_sizes=[32]))
    with pytest.raises(RuntimeError):
        import_state(target, export_state(other, 0), HP)
    assert_same_state(export_state(target, 0), before)


# ---- mutable hyperparameters ----


def test_hyperparameters_start_from_the_config_and_survive_a_checkpoint(spaces):
    trainer = make_trainer(spaces, learning_rate=5e-4, gamma=0.98)
    assert trainer.hyperparams() == {**HP, "learning_rate": 5e-4, "gamma": 0.98, "entropy_coef": 0.0}
    mutated = {"learning_rate": 2e-4, "entropy_coef": 0.03, "clip_ratio": 0.1, "gamma": 0.995}
    trainer.set_hyperparams(mutated)
    buffer = io.BytesIO()
    torch.save(trainer.state_dict(), buffer)
    state = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)  # as a checkpoint is read
    fresh = make_trainer(spaces, learning_rate=5e-4, gamma=0.98)  # resumed with the same options
    fresh.load_state_dict(state)
    assert fresh.hyperparams() == mutated

    changed = make_trainer(spaces, learning_rate=1e-9, gamma=0.98)  # --resume --learning-rate 1e-9: that wins
    changed.load_state_dict(state)
    assert changed.hyperparams() == {**mutated, "learning_rate": 1e-9}

    del state["hyperparams"]  # a checkpoint from before mutable hyperparameters: the options
    fresh.load_state_dict(state)
    assert fresh.hyperparams() == {**HP, "learning_rate": 5e-4, "gamma": 0.98, "entropy_coef": 0.0}


def test_set_hyperparams_checks_every_value_before_setting_any(spaces):
    trainer = make_trainer(spaces)
    before = trainer.hyperparams()
    for bad in ({"learning_rate": 1e-3, "batch_size": 3}, {"entropy_coef": 0.5, "learning_rate": 0.0},
                {"gamma": math.nan}, {"clip_ratio": True}):
        with pytest.raises(ValueError):
            trainer.set_hyperparams(bad)
        assert trainer.hyperparams() == before
    trainer.set_hyperparams({"clip_ratio": 0.3})  # a subset: the others stay
    assert trainer.hyperparams() == {**before, "clip_ratio": 0.3}


@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_a_mutated_learning_rate_is_what_the_optimizer_steps_with(spaces, schedule):
    trainer = make_trainer(spaces, lr_schedule=schedule)
    trainer.total_env_steps = 1000
    trainer.set_hyperparams({"learning_rate": 3e-4})
    metrics = trainer.train(make_batch(spaces, 0), 0, env_steps=500)
    expected = 3e-4 * (0.5 if schedule == "linear" else 1.0)
    assert metrics["lr"] == pytest.approx(expected)
    assert all(g["lr"] == pytest.approx(expected) for g in trainer.optimizer.param_groups)


def test_mutated_entropy_clip_and_gamma_reach_the_loss_and_the_targets(spaces, monkeypatch):
    """Two identical trainers on the same batch: the first minibatch's loss differs by exactly the entropy term,
    and the loss and targets are computed with the trainer's current clip ratio and gamma."""
    seen: list[dict] = []
    real_loss, real_vtrace = mlp_gradients.appo_loss_gradients, trainer_module.vtrace

    def loss_spy(*args, **kwargs):  # CartPole's MLP: the loss with its gradients written out (mlp_gradients.py)
        out, grads = real_loss(*args, **kwargs)
        seen.append({"clip_ratio": kwargs["clip_ratio"], "entropy_coef": kwargs["entropy_coef"],
                     "total": out.total.item(), "entropy": out.entropy})
        return out, grads

    def vtrace_spy(*args, **kwargs):
        seen.append({"gamma": args[6]})
        return real_vtrace(*args, **kwargs)

    monkeypatch.setattr(mlp_gradients, "appo_loss_gradients", loss_spy)
    monkeypatch.setattr(trainer_module, "vtrace", vtrace_spy)
    batch = make_batch(spaces, 3)

    def run(hp: dict) -> tuple[list[dict], dict]:
        trainer = make_trainer(spaces, seed=0)
        trainer.set_hyperparams(hp)
        seen.clear()
        torch.manual_seed(1)
        metrics = trainer.train(batch, 0)
        assert seen[0] == {"gamma": hp["gamma"]}
        assert all(c["clip_ratio"] == hp["clip_ratio"] and c["entropy_coef"] == hp["entropy_coef"] for c in seen[1:])
        return list(seen), metrics

    base = {"entropy_coef": 0.0, "clip_ratio": 0.2, "gamma": 0.99}
    a, ma = run(base)
    b, _ = run({**base, "entropy_coef": 0.05})
    assert a[1]["entropy"] == pytest.approx(b[1]["entropy"], rel=1e-6)  # the same weights, the same minibatch
    assert b[1]["total"] - a[1]["total"] == pytest.approx(-0.05 * a[1]["entropy"], rel=1e-4)
    c, mc = run({**base, "clip_ratio": 0.1, "gamma": 0.95})
    assert mc["value_target_mean"] != pytest.approx(ma["value_target_mean"])  # another gamma, other targets


# ---- mutation ----


@pytest.mark.parametrize("name", MUTABLE)
def test_mutation_stays_within_the_declared_range(name):
    rng, r = random.Random(0), PBTRanges()[name]
    starts = [r.low, r.high, (r.low + r.high) / 2, r.low / 10 if r.low else 0.0, r.high * 10]
    if name == "gamma":
        starts += [1.0, 0.5, 0.99999]
    for start in starts:
        value = start
        for _ in range(2000):
            value = perturb(value, name, 1.5, rng)
            assert r.low <= value <= r.high, (start, value)
            if name == "gamma":
                assert value < 1.0


def test_a_perturbation_multiplies_or_divides_by_the_factor():
    rng = random.Random(1)
    seen = {round(perturb(1e-3, "learning_rate", 1.2, rng), 12) for _ in range(200)}
    assert seen == {round(1e-3 * 1.2, 12), round(1e-3 / 1.2, 12)}
    gammas = {round(1 - perturb(0.99, "gamma", 2.0, rng), 12) for _ in range(200)}
    assert gammas == {0.02, 0.005}  # on 1 - gamma: the horizon halves or doubles
    assert perturb(0.0, "entropy_coef", 1.2, rng) == 0.0  # 0 stays 0 (reported in perturb's docstring)


def test_mutation_rate_decides_how_many_change():
    rng = random.Random(2)
    assert mutate(HP, 1.2, 0.0, rng) == (HP, ())
    after, drawn = mutate(HP, 1.2, 1.0, rng)
    assert drawn == MUTABLE and all(after[k] != HP[k] for k in MUTABLE)
    counts = [len(mutate(HP, 1.2, 0.5, rng)[1]) for _ in range(2000)]
    assert np.mean(counts) == pytest.approx(2.0, abs=0.15)
    assert mutate({**HP, "other": 7.0}, 1.2, 1.0, rng)[0]["other"] == 7.0  # no range: copied as it is


def test_a_new_population_keeps_policy_0_and_spreads_the_others():
    out = spread(HP, 4, 1.2, 1.0, random.Random(0))
    assert sorted(out) == [0, 1, 2, 3] and out[0] == HP
    assert all(out[p] != HP for p in (1, 2, 3))


# ---- a round's rules ----


def hps(n: int) -> dict[int, dict[str, float]]:
    return {p: {**HP, "learning_rate": 1e-4 * (p + 1)} for p in range(n)}


def decide(returns, n, fraction=0.25, mutation_rate=0.0, seed=0):
    return PBTRound(3, 5000).decide(returns, hps(n), fraction, 1.2, mutation_rate, random.Random(seed))


def test_the_worst_fraction_copies_from_the_best_fraction():
    returns = {p: float(r) for p, r in enumerate([50, 10, 80, 30, 90, 20, 70, 60])}
    for seed in range(20):
        out = decide(returns, 8, seed=seed)  # ceil(0.25 * 8) = 2: policies 1 and 5 copy 4 or 2
        assert [e.target for e in out] == [5, 1]
        assert all(e.source in (4, 2) for e in out)
        for e in out:
            assert (e.round, e.env_steps) == (3, 5000)
            assert (e.target_return, e.source_return) == (returns[e.target], returns[e.source])
            assert e.before == hps(8)[e.target] and e.after == hps(8)[e.source] and e.mutated == ()
    assert {e.source for seed in range(20) for e in decide(returns, 8, seed=seed)} == {2, 4}  # both drawn


def test_fraction_rounds_up_without_float_noise():
    returns = {p: float(p) for p in range(10)}
    assert len(decide(returns, 10, fraction=0.3)) == 3  # 0.3 * 10 = 3.0000000000000004
    assert len(decide(returns, 10, fraction=0.25)) == 3  # ceil(2.5)
    assert len(decide({p: float(p) for p in range(3)}, 3, fraction=0.1)) == 1


def test_policies_without_returns_are_neither_ranked_nor_replaced():
    returns = {0: None, 1: 10.0, 2: math.nan, 3: 30.0}  # 4 absent
    for seed in range(10):
        out = decide(returns, 5, fraction=0.5, seed=seed)  # ceil(2.5) = 3, but 2 ranked policies: one pair
        assert [(e.target, e.source) for e in out] == [(1, 3)]
    assert decide({0: 5.0}, 2) == [] and decide({}, 4) == []


def test_two_policies_one_replaces_the_other_only_when_strictly_worse():
    assert decide({0: 1.0, 1: 1.0}, 2, fraction=0.5) == []
    assert [(e.target, e.source) for e in decide({0: 1.0, 1: 2.0}, 2, fraction=0.5)] == [(0, 1)]
    assert [(e.target, e.source) for e in decide({0: -1.0, 1: -2.0}, 2, fraction=0.5)] == [(1, 0)]


def test_ties_never_copy_an_equal_policy_and_sets_never_overlap():
    out = decide({0: 5.0, 1: 5.0, 2: 5.0, 3: 1.0}, 4, fraction=0.5)  # best 0, 1; worst 2 (a tie), 3
    assert [(e.target, e.source) for e in out if e.target == 3] and all(e.target != 2 for e in out)
    for seed in range(50):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(2, 12))
        returns = {p: float(rng.integers(0, 4)) for p in range(n) if rng.random() < 0.8}
        out = decide(returns, n, fraction=float(rng.uniform(0.05, 0.5)), mutation_rate=0.5, seed=seed)
        targets, sources = {e.target for e in out}, {e.source for e in out}
        assert not targets & sources and len(targets) == len(out)
        assert all(e.source_return > e.target_return and e.target != e.source for e in out)


def test_decisions_replay_from_a_seed_and_mutate_the_sources_values():
    returns = {p: float(p) for p in range(8)}
    a, b = decide(returns, 8, mutation_rate=0.5, seed=4), decide(returns, 8, mutation_rate=0.5, seed=4)
    assert a == b
    assert all(e.after[n] == hps(8)[e.source][n] for e in a for n in MUTABLE if n not in e.mutated)
    assert sum(len(e.mutated) for e in a) > 0
    assert Exploit.from_dict(a[0].as_dict()) == a[0]
    with pytest.raises(ValueError, match="without hyperparameters"):
        decide({9: 1.0}, 2)


# ---- the log ----


def test_pbt_log_writes_a_header_then_one_row_per_replacement(tmp_path):
    log = PBTLog(str(tmp_path), started=0.0)
    assert log.last_round() == 0
    e = Exploit(3, 120_000, 2, 0, 85.0, 412.25, dict(HP), {**HP, "learning_rate": 1e-3 / 1.2}, ("learning_rate",))
    log.write(e, time_s=12.5)
    log.write(dataclasses.replace(e, round=4, target=1).as_dict(), time_s=20.0)
    with open(tmp_path / "pbt.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["time_s", "env_steps", "round", "target", "source", "target_return", "source_return",
                       "learning_rate_before", "learning_rate_after", "entropy_coef_before", "entropy_coef_after",
                       "clip_ratio_before", "clip_ratio_after", "gamma_before", "gamma_after"]
    assert len(rows) == 3
    first = dict(zip(rows[0], rows[1], strict=True))
    assert (first["env_steps"], first["round"], first["target"], first["source"]) == ("120000", "3", "2", "0")
    assert float(first["source_return"]) == 412.25 and float(first["time_s"]) == 12.5
    assert float(first["learning_rate_after"]) == 1e-3 / 1.2  # exact
    assert PBTLog(str(tmp_path)).last_round() == 4
    line = log.line(e)
    assert line.startswith("daskrl: PBT round 3: policy 2 (return 85.0) <- policy 0 (return 412.2); ")
    assert "learning_rate 0.001 -> 0.000833333" in line and "gamma 0.99 -> 0.99" in line


# ---- the components ----


def learner_setup(spaces) -> LearnerSetup:
    learner = dataclasses.replace(LearnerConfig(), learning_rate=1e-3)
    return LearnerSetup(spaces=spaces, model=ModelConfig(), learner=learner, samples_per_batch=T * N,
                        total_env_steps=0, seed=0, remote_params=False, rank=0, num_learners=1, policy_index=0,
                        tagged=False, snapshots=0, snapshot_every=50, components=pack_components(), cut=None,
                        algo=AlgoConfig(), trainer="daskrl.algo.appo.trainer:APPOTrainer", deterministic=False,
                        record_schedule=False, offline=False, frozen_opponent=None)


def published(desc: dict) -> tuple[int, dict[str, np.ndarray]]:
    """The version and weights in a learner's parameter block, read as a sampler on its host would."""
    header = shm.attach(desc["header"], desc["header"]["address"])
    data = shm.attach(desc["data"], desc["data"]["address"])
    version, raw = int(header.read()[1]), data.read()
    header.close()
    data.close()
    out = {}
    for key, offset, shape, dtype in desc["layout"]:
        n = int(np.prod(shape)) if shape else 1
        out[key] = raw[offset:offset + n * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
    return version, out


def test_a_learner_imports_another_learners_state_and_publishes_it_as_its_next_version(inproc, spaces):
    workers = sorted(dask_internals.cluster_workers(inproc.client))
    a, b = (spawn(inproc.client, Learner, f"pbtlearner{next(_ids)}", run_id=inproc.run_id, worker=w,
                  setup=learner_setup(spaces)) for w in workers)
    try:
        for handle in (a, b):  # running: the calls queue up between training steps on the learners' threads
            assert handle.call("start") == "running"
        b.call("set_hyperparams", {"entropy_coef": 0.02})
        state = a.call("export_training_state")
        version_before = b.call("stats")["policy_version"]
        new_hp = {**a.call("hyperparams"), "learning_rate": 2e-3}
        version = b.call("import_training_state", state, new_hp)
        assert version == version_before + 1
        assert b.call("hyperparams") == new_hp and b.call("stats")["hyperparams"] == new_hp
        got_version, weights = published(b.call("params_desc"))
        assert got_version == version
        for key, value in state["model"].items():
            assert np.array_equal(weights[key], value.numpy()), key
        with pytest.raises(Exception, match="gamma"):
            b.call("import_training_state", state, {"gamma": 7.0})
        stats = b.call("stats")
        assert stats["policy_version"] == version and stats["error_count"] == 0  # a refused import publishes nothing
    finally:
        for handle in (a, b):
            handle.call("stop")


def test_a_checkpoint_state_shares_no_tensor_with_the_learner_that_goes_on(inproc, spaces):
    """The runner serializes a checkpoint after the learner's thread went back to training: a state holding the live
    tensors would take in later steps (here, in-process workers hand the state over without a copy, and an import
    changes the live weights in place)."""
    workers = sorted(dask_internals.cluster_workers(inproc.client))
    a, b = (spawn(inproc.client, Learner, f"pbtlearner{next(_ids)}", run_id=inproc.run_id, worker=w,
                  setup=learner_setup(spaces)) for w in workers)
    try:
        for handle in (a, b):
            assert handle.call("start") == "running"
        state = b.call("checkpoint_state")
        kept = {k: v.clone() for k, v in state["model"].items()}
        other = a.call("export_training_state")
        for value in other["model"].values():
            if value.is_floating_point():
                value.add_(1.0)  # weights unlike b's
        b.call("import_training_state", other, b.call("hyperparams"))
        for key, value in state["model"].items():
            assert torch.equal(value, kept[key]), f"{key} changed after the checkpoint state was taken"
    finally:
        for handle in (a, b):
            handle.call("stop")


def test_the_controller_numbers_rounds_and_replays_from_the_run_seed(inproc):
    config = Config().replace(num_policies=4, pbt=True, pbt_replace_fraction=0.25, seed=3)
    returns = {0: 1.0, 1: 5.0, 2: None, 3: 3.0}
    runs = []
    for first_round in (1, 1, 5):  # two alike, then a resumed run's controller
        controller = spawn(inproc.client, PBTController, f"pbt{next(_ids)}", run_id=inproc.run_id,
                           setup=pbt_setup(config, first_round=first_round))
        try:
            initial = controller.call("initial_hyperparams", HP)
            assert sorted(initial) == [0, 1, 2, 3] and initial[0] == HP
            decided = [exploits_of(controller.call("round", steps, returns, initial)) for steps in (1000, 2000)]
            runs.append((initial, decided))
            assert controller.call("stats")["pbt"]["next_round"] == first_round + 2
        finally:
            controller.call("stop")
        for number, (steps, exploits) in enumerate(zip((1000, 2000), decided, strict=True), start=first_round):
            assert [(e.round, e.env_steps, e.target, e.source) for e in exploits] == [(number, steps, 0, 1)]
    assert runs[0] == runs[1]
    assert runs[2][0] != runs[0][0]  # a resumed run does not repeat the draws of the first rounds
