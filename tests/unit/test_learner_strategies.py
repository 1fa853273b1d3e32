"""The learner side's strategies, each chosen once instead of a branch per step: the neutral form of a batch's
optional fields, one learner's collectives as the identity (its statistics exactly ``RunningMeanStd.update``'s), the
slot readers, when slots go back, and a learner's role in its group."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from daskrl.algo.appo.recurrent import SequenceBatch
from daskrl.algo.appo.trainer import TrajectoryBatch
from daskrl.algo.appo.trajectory_minibatches import TrajectoryMinibatches, targets_from
from daskrl.algo.common.collectives import SoloGroup, update_over_group
from daskrl.algo.common.normalizers import RunningMeanStd
from daskrl.config import ModelConfig
from daskrl.envs import probe_env
from daskrl.learning.batcher import Batcher, Delivery
from daskrl.learning.group.group_member import Alone, Leader, Member, Unpublished, role_for
from daskrl.learning.slot_reader import STATE_FIELDS, WHOLE_SLOTS, LocalSlots, PolicyColumns, SlotReader, reader_for
from daskrl.models.actor_critic import build_model

T, B = 3, 2


def test_a_batch_without_its_optional_fields_gets_their_neutral_form():
    batch = TrajectoryBatch(obs=np.zeros((T + 1, B, 4), np.float32), actions=np.zeros((T, B), np.int64),
                            rewards=np.zeros((T, B), np.float32), dones=np.zeros((T, B), bool),
                            log_probs=np.zeros((T, B), np.float32), policy_version=np.zeros((T, B), np.int32))
    assert batch.final_obs.shape == (0, 4) and batch.final_index.shape == (0,)
    assert batch.rnn_states.shape == (B, 0)  # a feed-forward policy's state has width 0
    assert batch.valid.dtype == bool and batch.valid.shape == (T, B) and batch.valid.all()


def test_a_recurrent_layout_refuses_start_states_of_another_width_in_one_line():
    model = build_model(probe_env("CartPole-v1"), ModelConfig(rnn="gru", rnn_size=8), 0)
    obs, dones = torch.zeros(T + 1, B, 4), torch.zeros(T, B)
    with pytest.raises(ValueError, match=r"states of their slots' starts \(\[2, 8\]\), not \[2, 0\]"):
        SequenceBatch(model, obs, torch.zeros(T * B, dtype=torch.int64), dones, torch.zeros(B, 0), T)


@pytest.mark.parametrize("shape", [(), (3,), (2, 2)])
def test_one_learners_statistics_through_its_group_are_those_of_a_plain_update_to_the_bit(shape):
    rng = np.random.default_rng(0)
    plain, grouped = RunningMeanStd(shape), RunningMeanStd(shape)
    for _ in range(4):
        x = (rng.normal(size=(37, *shape)) * 3 + 5).astype(np.float32)
        plain.update(x)
        update_over_group(grouped, torch.from_numpy(x), SoloGroup(), torch.device("cpu"))
    assert np.array_equal(plain.mean, grouped.mean) and np.array_equal(plain.var, grouped.var)
    assert plain.count == grouped.count == 4 * 37


def test_one_learners_gradient_sum_is_the_identity():
    layer = torch.nn.Linear(2, 1)
    layer(torch.ones(1, 2)).sum().backward()
    grads = [p.grad for p in layer.parameters()]
    assert SoloGroup().sum_gradients(layer.parameters(), True)
    assert all(p.grad is g for p, g in zip(layer.parameters(), grads, strict=True))  # not even a copy
    assert not SoloGroup().sum_gradients(layer.parameters(), False)


def _slot_arrays(slots: int = 2) -> dict[str, np.ndarray]:
    return {"obs": np.arange(slots * (T + 1) * B, dtype=np.float32).reshape(slots, T + 1, B, 1),
            "actions": np.zeros((slots, T, B), np.int64), "rewards": np.ones((slots, T, B), np.float32),
            "terminated": np.zeros((slots, T, B), bool), "truncated": np.zeros((slots, T, B), bool),
            "log_probs": np.zeros((slots, T, B), np.float32), "policy_version": np.arange(slots * T).reshape(slots, T),
            "final_at": np.full((slots, B), -1, np.int32), "final_obs": np.zeros((slots, B, 1), np.float32),
            "rnn_states": np.arange(slots * B * 2, dtype=np.float32).reshape(slots, B, 2)}


def test_whole_slots_are_all_valid_and_carry_the_start_states_of_a_recurrent_policy():
    source = LocalSlots(_slot_arrays())
    recurrent = reader_for(0, tagged=False, cut=None, recurrent=True)
    assert recurrent.fields[-1] == "rnn_states" and "rnn_states" not in WHOLE_SLOTS.fields
    batch = recurrent.join([recurrent.read(source, 0), recurrent.read(source, 1)])
    assert batch.valid.all() and batch.valid.shape == (T, 2 * B)
    np.testing.assert_array_equal(batch.policy_version, np.repeat(np.arange(2 * T).reshape(2, T).T, B, axis=1))
    np.testing.assert_array_equal(batch.rnn_states, _slot_arrays()["rnn_states"].reshape(2 * B, 2))
    feed_forward = WHOLE_SLOTS.join([WHOLE_SLOTS.read(source, 0)])
    assert feed_forward.rnn_states.shape == (B, 0)  # the slot's states are not read for a feed-forward policy
    tagged = reader_for(1, tagged=True, cut=None, recurrent=False)
    assert isinstance(tagged.columns, PolicyColumns) and tagged.fields[-1] == "policy_id"
    assert tagged.wants({"worker": "w", "slot": 0, "frames": 1, "inc": "i", "policies": [1, 2]})
    assert not tagged.wants({"worker": "w", "slot": 0, "frames": 1, "inc": "i", "policies": [0]})
    assert tagged.label({"slots": [0], "inc": "i"})["policy"] == 1 and "policy" not in WHOLE_SLOTS.label(
        {"slots": [0], "inc": "i"})


class _Owner:
    name = "learner"

    def __init__(self) -> None:
        self.freed: list[tuple[str, dict]] = []

    def put(self, queue: str, payload: dict) -> None:
        self.freed.append((queue, payload))


@pytest.mark.parametrize("sync", [False, True])
def test_slots_go_back_when_copied_or_with_sync_after_the_step_with_its_version(sync):
    owner = _Owner()
    batcher = Batcher(owner, samples_per_batch=T * B, deliver=lambda delivery: None, hold_slots=sync,
                      reader=SlotReader(WHOLE_SLOTS.columns, STATE_FIELDS))
    batcher.attach_arrays("rollout_0", _slot_arrays(), "inc")
    held: list = []
    batcher._take(("rollout_0", 1, "inc"), held)
    assert held == ([("rollout_0", 1, "inc")] if sync else [])
    assert owner.freed == ([] if sync else [("free:rollout_0", {"slots": [1], "inc": "inc"})])
    owner.freed.clear()
    batcher.release(Delivery(None, held, [("rollout_1", 0, "x")], 1), 7)  # the batch itself is not looked at
    expected = [("free:rollout_0", {"slots": [1], "inc": "inc", "version": 7})] if sync else []
    expected.append(("free:rollout_1", {"slots": [0], "inc": "x", **({"version": 7} if sync else {})}))
    assert owner.freed == expected


def test_a_learners_role_follows_its_rank_and_a_member_publishes_nothing():
    assert type(role_for(0, 1)) is Alone and type(role_for(0, 3)) is Leader and type(role_for(2, 3)) is Member
    member = role_for(2, 3)
    publication = member.publication(None, None, remote=False)
    assert isinstance(publication, Unpublished) and not publication.remote
    assert [publication.publish(None), publication.publish(None)] == [1, 2]  # counts the leader's versions
    with pytest.raises(RuntimeError, match="leader"):
        _ = publication.desc
    assert member.share_of([["a"], ["b"]]) == ["b"]
    alone = role_for(0, 1)
    alone.record(1, torch.nn.Linear(1, 1))
    assert not alone.digests  # nobody to agree with
    leader = role_for(0, 2)
    leader.record(1, torch.nn.Linear(1, 1))
    assert len(leader.digests) == 1
    group = SoloGroup()  # a member without its group waits; a leader trains alone
    assert leader.accepts(0, group) and not member.accepts(0, group) and not member.accepts(1, group)


def test_trajectory_minibatches_hold_every_step_of_their_columns_time_major():
    """``--targets-from minibatch``: a minibatch is whole trajectories (V-trace's recursion runs within it), laid out
    [T, columns]; every column is in one minibatch an epoch, and columns that fill none wait for the next shuffle."""
    steps, columns = 4, 7
    model = build_model(probe_env("CartPole-v1"), ModelConfig(), 0)
    layout = TrajectoryMinibatches(model, torch.zeros(steps + 1, columns, 4), torch.zeros(steps * columns),
                                   torch.zeros(steps, columns), torch.zeros(columns, 0), steps)
    samples = layout.minibatch_samples(9)  # rounded down to whole trajectories: 2 columns
    assert samples == 2 * steps and layout.minibatch_samples(1) == steps and layout.minibatch_samples(99) == 28
    order = layout.order(samples)
    assert order.numel() == 3 * samples  # 3 minibatches of 2 columns; the 7th column waits
    seen = []
    for part in order.reshape(3, steps, 2):  # time-major: row t holds step t of each column
        t, n = part // columns, part % columns
        assert (t == torch.arange(steps)[:, None]).all() and (n == n[0]).all()
        seen += n[0].tolist()
    assert len(set(seen)) == 6


@pytest.mark.parametrize(("env", "model_options", "setting", "expected"), [
    ("atari/Breakout", {}, "auto", "minibatch"),  # an image policy: its forward passes are its step's cost
    ("CartPole-v1", {}, "auto", "batch"),  # an MLP's pass over the batch is cheap
    ("atari/Breakout", {"rnn": "gru"}, "auto", "batch"),  # a core takes its sequences' states from that pass
    ("CartPole-v1", {}, "minibatch", "minibatch"),
])
def test_targets_from_auto_is_per_minibatch_for_feed_forward_image_policies(env, model_options, setting, expected):
    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install 'daskrl[atari]')")
    model = build_model(probe_env(env), ModelConfig(**model_options), 0)
    assert targets_from(setting, model) == expected


def test_targets_per_minibatch_with_a_recurrent_core_is_refused_in_one_line():
    model = build_model(probe_env("CartPole-v1"), ModelConfig(rnn="gru", rnn_size=8), 0)
    with pytest.raises(ValueError, match="needs a feed-forward policy.*use --targets-from batch"):
        targets_from("minibatch", model)
    with pytest.raises(ValueError, match="must be one of auto, batch, minibatch"):
        targets_from("minibatches", model)
