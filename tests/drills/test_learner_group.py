"""Data-parallel learners (``--num-learners``) and devices: a group's update is one learner's update on the whole
batch, the batch split is exact, the members hold the same weights after every step of a real run, a killed member
re-forms the group, GPU workers get the learner, and a device a worker lacks is one line before anything starts.

The groups are real ``torch.distributed`` gloo groups on loopback; the runs are real LocalClusters.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.config import Config, ConfigError
from daskrl.driver.fleet.placement import place
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import GroupBroken
from daskrl.learning.batcher import Batcher, Delivery
from daskrl.learning.group.learner_group import LearnerGroup, open_store
from daskrl.learning.group.shares import split_slots
from daskrl.learning.slot_reader import LocalSlots, SlotReadError
from daskrl.models.actor_critic import build_model
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.incidents import Incidents

from ..helpers import REPORT_OFTEN, run_config, slow

T, N, OBS = 8, 16, 4


def _spaces() -> EnvSpaces:
    import gymnasium as gym

    return EnvSpaces.from_env(gym.make("CartPole-v1"))


def _batch(seed: int = 0) -> TrajectoryBatch:
    """A CartPole-shaped batch with episode ends, time-limit finals and samples too stale to train on."""
    rng = np.random.default_rng(seed)
    dones = rng.random((T, N)) < 0.1
    final_at = np.flatnonzero(dones.reshape(-1))[::2]  # half of the ends were time limits
    versions = rng.integers(0, 12, (T, N))  # with max_policy_lag 8 and version 12, some are masked out
    return TrajectoryBatch(
        obs=rng.normal(size=(T + 1, N, OBS)).astype(np.float32) * 2 + 1,
        actions=rng.integers(0, 2, (T, N)).astype(np.int64),
        rewards=rng.normal(size=(T, N)).astype(np.float32),
        dones=dones,
        log_probs=np.log(rng.uniform(0.2, 0.8, (T, N))).astype(np.float32),
        policy_version=versions,
        final_obs=rng.normal(size=(len(final_at), OBS)).astype(np.float32),
        final_index=final_at.astype(np.int64),
    )


def _columns(batch: TrajectoryBatch, lo: int, hi: int) -> TrajectoryBatch:
    """Env columns ``lo:hi`` of ``batch``, as a member's share of it (final observations re-indexed)."""
    t, b = np.divmod(batch.final_index, N)
    keep = (b >= lo) & (b < hi)
    return TrajectoryBatch(obs=batch.obs[:, lo:hi].copy(), actions=batch.actions[:, lo:hi].copy(),
                           rewards=batch.rewards[:, lo:hi].copy(), dones=batch.dones[:, lo:hi].copy(),
                           log_probs=batch.log_probs[:, lo:hi].copy(), policy_version=batch.policy_version[:, lo:hi],
                           final_obs=batch.final_obs[keep], final_index=t[keep] * (hi - lo) + b[keep] - lo)


def _trainer(cfg: Config, device: str = "cpu") -> APPOTrainer:
    return APPOTrainer(build_model(_spaces(), cfg.model, seed=3), cfg.learner, 0, torch.device(device))


def _flat_weights(trainer: APPOTrainer) -> torch.Tensor:
    return torch.cat([v.detach().double().reshape(-1) for v in trainer.model.state_dict().values()])


def _train_in_group(cfg: Config, shares: list[TrajectoryBatch], steps: int, device: str = "cpu") -> list[APPOTrainer]:
    """Train one trainer per share, as members of one group (threads of this process), ``steps`` steps."""
    world = len(shares)
    store = open_store("127.0.0.1", world)
    trainers = [_trainer(cfg, device) for _ in shares]
    errors: list[BaseException] = []

    def member(rank: int) -> None:
        try:
            trainers[rank].group = LearnerGroup("127.0.0.1", store.port, rank, world, 1, torch.device(device),
                                                store=store if rank == 0 else None)
            for step in range(steps):
                trainers[rank].train(shares[rank], current_version=12 + step)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=member, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return trainers


@pytest.mark.parametrize(("advantage", "tuning"), [
    ("vtrace", {}), ("gae", {}),
    # LAMB's per-tensor trust ratios, the KL penalty, and a learning rate that follows the group's KL every epoch
    ("vtrace", {"optimizer": "lamb", "weight_decay": 0.01, "kl_coef": 0.5, "lr_schedule": "kl_adaptive"}),
    # each minibatch its own targets: its advantages' moments and the return statistics summed over the group
    ("vtrace", {"targets_from": "minibatch"}), ("gae", {"targets_from": "minibatch"}),
], ids=["vtrace", "gae", "vtrace-lamb-kl", "vtrace-minibatch-targets", "gae-minibatch-targets"])
def test_a_group_update_equals_one_learner_on_the_whole_batch(advantage, tuning):
    """Two members on two halves of a batch apply the update one learner applies on all of it: same weights, same
    observation and return statistics (within float tolerance), with stale samples masked differently per half."""
    cfg = Config().replace(batch_size=T * N, num_batches_per_epoch=1, num_epochs=2, max_policy_lag=8,
                           advantage=advantage, learning_rate=3e-3, **tuning)
    batch = _batch()
    if "kl_coef" in tuning:  # one half acted as the (near uniform) policy does: alone, its KL would raise the rate
        batch.log_probs[:, :N // 2] = np.log(0.5)
    single = _trainer(cfg)
    for step in range(3):
        single.train(batch, current_version=12 + step)
    group = _train_in_group(cfg, [_columns(batch, 0, N // 2), _columns(batch, N // 2, N)], steps=3)

    assert torch.equal(_flat_weights(group[0]), _flat_weights(group[1])), "the members' weights differ"
    start = _flat_weights(_trainer(cfg))
    moved = (_flat_weights(single) - start).abs().max()
    assert moved > 1e-3, "the update did not change the weights: the comparison would prove nothing"
    difference = (_flat_weights(group[0]) - _flat_weights(single)).abs().max()
    assert difference < 1e-5 * max(1.0, float(moved)), (difference, moved)
    assert group[0].obs_rms.count == single.obs_rms.count == 3 * T * N
    np.testing.assert_allclose(group[0].obs_rms.mean, single.obs_rms.mean, rtol=1e-9)
    np.testing.assert_allclose(group[0].obs_rms.var, single.obs_rms.var, rtol=1e-9)
    np.testing.assert_allclose(group[1].returns.stats.mean, single.returns.stats.mean, rtol=1e-5)
    assert group[0].samples_trained == single.samples_trained == 3 * T * N
    assert group[0].hyperparams() == group[1].hyperparams() == pytest.approx(single.hyperparams())
    if "kl_coef" in tuning:
        assert single.hyperparams()["learning_rate"] != 3e-3, "the KL-adaptive rate never moved"


@pytest.mark.parametrize("advantage", ["vtrace", "gae"])
def test_targets_from_one_minibatch_of_the_whole_batch_are_the_batch_passes_targets(advantage):
    """With one minibatch of every trajectory and one epoch, the minibatch's own pass is the pass over the batch (the
    same weights, the same samples): both ways make the same update, step after step, time-limit bootstraps, stale
    samples and return statistics included. Several minibatches then train on targets of the weights they train."""
    cfg = Config().replace(batch_size=T * N, num_batches_per_epoch=1, num_epochs=1, max_policy_lag=8,
                           advantage=advantage, learning_rate=3e-3)
    batch = _batch()
    by_batch, by_minibatch = _trainer(cfg), _trainer(cfg.replace(targets_from="minibatch"))
    assert by_minibatch.by_hand is None and by_batch.by_hand is not None  # the MLP's written-out path keeps the batch's
    for step in range(3):
        expected = by_batch.train(batch, current_version=12 + step)
        got = by_minibatch.train(batch, current_version=12 + step)
        assert got["value_target_mean"] == pytest.approx(expected["value_target_mean"], rel=1e-5, abs=1e-6)
    moved = (_flat_weights(by_batch) - _flat_weights(_trainer(cfg))).abs().max()
    assert moved > 1e-3, "the update did not change the weights: the comparison would prove nothing"
    difference = (_flat_weights(by_minibatch) - _flat_weights(by_batch)).abs().max()
    assert difference < 1e-5 * max(1.0, float(moved)), (difference, moved)
    np.testing.assert_allclose(by_minibatch.returns.stats.mean, by_batch.returns.stats.mean, rtol=1e-6)

    several = _trainer(cfg.replace(targets_from="minibatch", batch_size=T * N // 4, num_batches_per_epoch=4))
    metrics = several.train(batch, current_version=12)
    assert metrics["updates"] == 4 and np.isfinite(metrics["value_target_mean"])
    assert (_flat_weights(several) - _flat_weights(by_batch)).abs().max() > 1e-4  # not the one-pass update


def test_a_group_skips_a_step_together_when_one_member_sees_nan():
    """A NaN in one member's share skips the step on every member (a member that stepped alone would diverge)."""
    cfg = Config().replace(batch_size=T * N, num_batches_per_epoch=1)
    batch = _batch()
    poisoned = _columns(batch, N // 2, N)
    poisoned.rewards[0, 0] = np.nan
    before = _flat_weights(_trainer(cfg))
    group = _train_in_group(cfg, [_columns(batch, 0, N // 2), poisoned], steps=1)
    for trainer in group:
        assert torch.equal(_flat_weights(trainer), before)
        assert trainer.train_steps == 1 and trainer.skipped_steps >= 1


def _group_of_two() -> tuple[LearnerGroup, LearnerGroup, object]:
    """A leader and a member (threads of this process), formed; and the leader's store (it serves it)."""
    store = open_store("127.0.0.1", 2)
    formed: dict[int, LearnerGroup] = {}

    def join(rank: int) -> None:
        formed[rank] = LearnerGroup("127.0.0.1", store.port, rank, 2, 1, torch.device("cpu"),
                                    store=store if rank == 0 else None)

    threads = [threading.Thread(target=join, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return formed[0], formed[1], store


def _sum_in_thread(group: LearnerGroup) -> dict:
    """Start ``group.sum_`` in a thread; the dict gets its error and how long it took."""
    out: dict = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            group.sum_(torch.ones(4))
        except GroupBroken as exc:
            out["error"] = exc
        out["seconds"] = time.monotonic() - t0

    out["thread"] = threading.Thread(target=run)
    out["thread"].start()
    return out


def test_a_member_in_a_step_the_stopping_leader_will_not_take_fails_at_once_and_knows_why():
    """A leader stops between two steps (the run ends) while a member already trains on a share of the next
    batch: the member's collective used to wait GROUP_TIMEOUT_S (30 s) for the leader, past the runner's 10 s wait
    for its thread. The leader's end() fails it at once, and the member can tell that end from a lost leader."""
    leader, member, _store = _group_of_two()
    blocked = _sum_in_thread(member)
    time.sleep(0.3)
    assert blocked["thread"].is_alive()  # the member waits for the leader's part of the step
    leader.end()
    blocked["thread"].join(10)
    assert isinstance(blocked.get("error"), GroupBroken) and blocked["seconds"] < 0.3 + 5, blocked
    assert member.ended()


def test_a_group_broken_by_a_lost_member_is_not_an_end():
    leader, member, _store = _group_of_two()
    blocked = _sum_in_thread(leader)
    time.sleep(0.3)
    member.close()  # as the member's process going away drops it
    blocked["thread"].join(10)
    assert isinstance(blocked.get("error"), GroupBroken), blocked
    assert not leader.ended()


def test_the_batch_split_is_exact():
    slots = [(f"rollout_{w}", s, "inc") for w in range(3) for s in range(4)]
    shares = split_slots(slots, 3)
    assert sorted(s for share in shares for s in share) == sorted(slots)  # each slot once
    assert [len(share) for share in shares] == [4, 4, 4]
    with pytest.raises(ValueError, match="cannot be split evenly"):
        split_slots(slots[:11], 3)


class _Owner:
    """What a batcher needs of its learner: a name, a way to hand slots back and incidents (recorded here)."""

    name = "learner"

    def __init__(self) -> None:
        self.freed: list[tuple[str, list[int]]] = []
        self.incidents = Incidents(logging.getLogger("test"))

    def put(self, queue: str, payload: dict) -> None:
        self.freed.append((queue, payload["slots"]))


def _slot_arrays(slots: int) -> dict[str, np.ndarray]:
    """A rollout worker's slots of 2 steps x 4 envs; the rewards encode the slot they are in (reward // 8)."""
    return {"obs": np.arange(slots * 3 * 4 * OBS, dtype=np.float32).reshape(slots, 3, 4, OBS),
            "actions": np.zeros((slots, 2, 4), np.int64), "rewards": np.arange(slots * 8, dtype=np.float32)
            .reshape(slots, 2, 4), "terminated": np.zeros((slots, 2, 4), bool),
            "truncated": np.zeros((slots, 2, 4), bool), "log_probs": np.zeros((slots, 2, 4), np.float32),
            "policy_version": np.zeros((slots, 2), np.int32), "final_at": np.full((slots, 4), -1, np.int32),
            "final_obs": np.zeros((slots, 4, OBS), np.float32)}


def test_a_leader_batcher_copies_its_share_and_assigns_the_rest():
    """The leader's batcher (two learners, slots of 2 x 4 samples, batches of 32): it copies half of each batch's
    slots, assigns the other half to the member, and hands back only what it copied."""
    owner, assigned, delivered = _Owner(), [], []
    batcher = Batcher(owner, samples_per_batch=32, deliver=delivered.append, hold_slots=False,
                      group=lambda: (1, 2), assign=lambda generation, shares: assigned.append((generation, shares)))
    batcher.attach_arrays("rollout_0", _slot_arrays(8), "inc")
    batcher.start()
    for slot in range(4):
        batcher.add("rollout_0", slot, "inc")
    deadline = time.monotonic() + 10
    while not delivered and time.monotonic() < deadline:
        time.sleep(0.01)
    batcher.stop()
    [delivery] = delivered
    assert isinstance(delivery, Delivery) and delivery.generation == 1
    [(generation, [member_share])] = assigned
    own = sorted({int(r) // 8 for r in delivery.batch.rewards.reshape(-1)})  # rewards encode the slot they came from
    members = sorted(slot for _, slot, _ in member_share)
    assert generation == 1 and len(own) == len(members) == 2 and sorted(own + members) == [0, 1, 2, 3]
    assert sorted(s for _, freed in owner.freed for s in freed) == own  # the member's are the leader's to free later
    assert sorted(s for _, s, _ in delivery.member_slots) == members


class _LostSlots(LocalSlots):
    """A rollout worker of another host lost mid-read: every read of its slots fails."""

    way = "comms"

    def read(self, slot: int, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
        raise SlotReadError(f"reading slot {slot} failed; its rollout worker is gone or was replaced")


def test_a_share_whose_every_slot_is_lost_mid_read_is_delivered_empty_and_the_batcher_goes_on():
    """A member's share of two slots of a rollout worker lost mid-read: the batcher thread counts both lost reads,
    hands the learner an empty delivery (nothing to train on) and takes the next share, which it copies."""
    owner, delivered = _Owner(), []
    batcher = Batcher(owner, samples_per_batch=16, deliver=delivered.append, hold_slots=False, group=lambda: (1, 2))
    batcher.attach_arrays("rollout_0", _slot_arrays(4), "inc")
    batcher.workers["lost"] = _LostSlots(batcher.workers["rollout_0"].arrays)
    batcher.incarnations["lost"] = "inc"
    batcher.start()
    batcher.add_share(1, [["lost", 0, "inc"], ["lost", 1, "inc"]])
    batcher.add_share(1, [["rollout_0", 2, "inc"], ["rollout_0", 3, "inc"]])
    deadline = time.monotonic() + 10
    while len(delivered) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
        if delivered:
            batcher.taken()
    batcher.stop()
    assert [d.batch is None for d in delivered] == [True, False] and batcher.lost_reads == 2
    assert sorted({int(r) // 8 for r in delivered[1].batch.rewards.reshape(-1)}) == [2, 3]
    assert owner.incidents.snapshot() == {"slot-read-failed": 2}


# ---- placement and devices ----


def _worker(name: str, **resources: float) -> dict:
    return {"name": name, "resources": dict(resources)}


def test_gpu_workers_get_the_learners_and_rollout_workers_avoid_them():
    workers = {"tcp://a:1": _worker("a"), "tcp://b:1": _worker("b", GPU=1), "tcp://c:1": _worker("c"),
               "tcp://d:1": _worker("d", GPU=1), "tcp://e:1": _worker("e")}
    placement = place(workers, Config().replace(num_learners=2, num_workers=3))
    assert sorted(placement.learners) == ["tcp://b:1", "tcp://d:1"]
    assert sorted(placement.rollout) == ["tcp://a:1", "tcp://c:1", "tcp://e:1"]
    cpu = place(workers, Config().replace(num_learners=1, num_workers=3, learner_device="cpu"))
    assert cpu.learner == "tcp://a:1"  # asked for the CPU: name order, and the GPU workers are left for others


def test_options_that_do_not_fit_a_group_are_refused_in_one_line_each():
    with pytest.raises(ConfigError) as info:
        Config().replace(num_learners=3, batch_size=512).validate()
    assert "--batch-size 512 does not split over --num-learners 3" in str(info.value)
    with pytest.raises(ConfigError) as info:
        Config().replace(inference_device="cuda").validate()
    assert "--inference-device cuda is for remote inference workers" in str(info.value)
    with pytest.raises(ConfigError, match="--learner-device must be auto, cpu, cuda or cuda:N"):
        Config().replace(learner_device="gpu").validate()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the refusal needs one without")
@slow("a CLI process that imports torch")
def test_asking_for_cuda_without_a_gpu_fails_fast_in_one_line(tmp_path):
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "daskrl", "train", "--env", "CartPole-v1", "--learner-device",
                           "cuda", "--train-dir", str(tmp_path), "--experiment", "gpu", "--dashboard-address", ""],
                          capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - t0
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    assert "--learner-device cuda" in errors[0] and "has no CUDA device" in errors[0] and "worker" in errors[0]
    assert "Traceback" not in done.stdout + done.stderr
    # fast: no wait for a cluster's timeouts (a minute and more); 10.3 s once beside another test file's run
    assert seconds < 20, f"took {seconds:.1f} s"
    # refused before anything was written: the experiment is free for the corrected command
    assert not (tmp_path / "gpu" / "config.json").exists() and not (tmp_path / "gpu" / "metrics.csv").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)")
def test_a_cuda_learner_step_matches_the_cpu_step():
    cfg = Config().replace(batch_size=T * N, num_batches_per_epoch=1)
    batch = _batch()
    cpu = _trainer(cfg)
    gpu = APPOTrainer(build_model(_spaces(), cfg.model, seed=3), cfg.learner, 0, torch.device("cuda"))
    cpu.train(batch, 12)
    gpu.train(batch, 12)
    weights = gpu.model.state_dict_numpy()
    for key, value in cpu.model.state_dict_numpy().items():
        np.testing.assert_allclose(weights[key], value, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)")
def test_two_learners_on_one_gpu_sum_through_gloo_as_one_learner():
    """NCCL refuses two ranks on one GPU ("Duplicate GPU detected"); such a group sums through gloo and still applies
    the update one learner applies on the whole batch."""
    cfg = Config().replace(batch_size=T * N, num_batches_per_epoch=1, num_epochs=2, learning_rate=3e-3)
    batch = _batch()
    single = _trainer(cfg, "cuda")
    for step in range(2):
        single.train(batch, current_version=12 + step)
    group = _train_in_group(cfg, [_columns(batch, 0, N // 2), _columns(batch, N // 2, N)], steps=2, device="cuda")
    assert [trainer.group.backend for trainer in group] == ["gloo", "gloo"]
    assert torch.equal(_flat_weights(group[0]), _flat_weights(group[1])), "the members' weights differ"
    moved = (_flat_weights(single) - _flat_weights(_trainer(cfg, "cuda"))).abs().max()
    assert moved > 1e-3
    assert (_flat_weights(group[0]) - _flat_weights(single)).abs().max() < 1e-4 * max(1.0, float(moved))


def test_setups_give_each_learner_its_rank():
    from daskrl.driver.fleet.role_setups import role_setups

    setups = role_setups(Config().replace(num_learners=3, batch_size=513 * 3), _spaces())
    assert [s.rank for s in setups.learners + setups.members] == [0, 1, 2]
    assert all(dataclasses.replace(s, rank=0) == setups.learners[0] for s in setups.members)  # nothing else differs


# ---- real runs ----


def _same_weights_after_every_step(learners: dict[str, dict]) -> int:
    """Steps at which both learners recorded a digest of their weights, checked equal; returns how many."""
    leader, member = (dict(map(tuple, learners[name]["digests"])) for name in ("learner", "learner_1"))
    common = sorted(set(leader) & set(member))
    assert [leader[s] for s in common] == [member[s] for s in common], "the learners' weights differ"
    return len(common)


def test_two_learners_solve_cartpole_holding_the_same_weights_after_every_step(tmp_path):
    from daskrl import train

    summary = train(run_config(tmp_path, "two", base=REPORT_OFTEN, num_learners=2, stop_at_return=475,
                               train_for_seconds=120))
    assert summary["episode_return_mean"] >= 475, summary["stop_reason"]
    learners = summary["learners"]
    assert sorted(learners) == ["learner", "learner_1"]
    assert learners["learner"]["address"] != learners["learner_1"]["address"]  # two worker processes
    assert [learners[n]["rank"] for n in ("learner", "learner_1")] == [0, 1]
    assert _same_weights_after_every_step(learners) >= 10


def test_the_learner_lands_on_the_worker_that_declares_a_gpu(tmp_path):
    """A LocalCluster whose third worker declares resources={"GPU": 1}: the learner is placed there (and trains on
    the CPU, which is all that worker has), the rollout workers elsewhere."""
    from distributed import Client, Nanny, Scheduler, SpecCluster

    from daskrl import train

    workers = {f"w{i}": {"cls": Nanny, "options": {"nthreads": 1, "resources": {"GPU": 1} if i == 2 else {}}}
               for i in range(3)}
    with SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
                     asynchronous=False) as cluster, Client(cluster) as client:
        gpu = next(a for a, w in dask_internals.cluster_workers(client).items() if w["resources"].get("GPU"))
        summary = train(run_config(tmp_path, "gpu", base=REPORT_OFTEN, train_for_env_steps=20_000), client=client)
    assert summary["learners"]["learner"]["address"] == gpu
    assert summary["learners"]["learner"]["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    rollout = [c["address"] for name, c in summary["data_path"]["components"].items() if name.startswith("rollout")]
    assert rollout and gpu not in rollout
