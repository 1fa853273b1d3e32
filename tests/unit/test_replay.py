"""Replay's pieces (daskrl/replay/) against hand computations: the sum tree, prioritized draws (chi-square), importance
weights, n-step transitions of a slot, the ring store and its reads into a block, and the update-to-data ratio with
several minibatches per request (--replay-batches-per-request)."""

from __future__ import annotations

import numpy as np
import pytest

from daskrl.replay import PrioritizedSampler, SumTree, TransitionStore, UniformSampler, slot_transitions
from daskrl.replay.ratio import AUTO_MAX_BATCHES, ReplayRatio, batches_per_request
from daskrl.replay.store import numpy_arrays, store_shapes

#: chi-square's 0.999 quantile for 15 degrees of freedom: a correct sampler fails this 1 time in 1,000 (seeded here)
CHI2_15_999 = 37.697


def test_sum_tree_keeps_sums_and_minimum_and_finds_prefixes():
    tree = SumTree(6)
    tree.update(np.arange(6), [1.0, 2.0, 3.0, 0.5, 4.0, 1.5])
    assert tree.total == pytest.approx(12.0) and tree.min == 0.5
    # prefix sums: [0,1) -> 0, [1,3) -> 1, [3,6) -> 2, [6,6.5) -> 3, [6.5,10.5) -> 4, [10.5,12) -> 5
    mass = [0.0, 0.999, 1.0, 2.99, 3.0, 6.2, 6.5, 10.49, 10.5, 11.99]
    assert tree.find(mass).tolist() == [0, 0, 1, 1, 2, 3, 4, 4, 5, 5]
    tree.update([4, 4], [9.0, 0.25])  # the last of a repeated index wins
    assert tree.total == pytest.approx(8.25) and tree.min == 0.25
    with pytest.raises(ValueError, match="non-negative"):
        tree.update([0], [-1.0])


def test_prioritized_draw_frequencies_match_priorities():
    n, draws = 16, 64_000
    sampler = PrioritizedSampler(n, alpha=0.7, beta=0.5, seed=3)
    errors = np.random.default_rng(0).uniform(0.05, 3.0, n)
    sampler.update(np.arange(n), errors)
    counts = np.zeros(n)
    for _ in range(draws // 64):
        np.add.at(counts, sampler.draw(n, 64).positions, 1)
    p = (errors + sampler.eps) ** 0.7
    expected = draws * p / p.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < CHI2_15_999, (chi2, counts, expected)
    # and a uniform draw from the same store ignores priorities
    uniform = UniformSampler(n, seed=1)
    counts = np.bincount(uniform.draw(n, draws).positions, minlength=n)
    assert ((counts - draws / n) ** 2 / (draws / n)).sum() < CHI2_15_999


def test_importance_weights_are_exact():
    sampler = PrioritizedSampler(8, alpha=0.5, beta=0.4)
    errors = np.array([1.0, 4.0, 0.25, 9.0, 2.0])  # 5 of 8 places used
    sampler.update(np.arange(5), errors)
    draw = sampler.draw(5, 32)
    p = (errors + 1e-6) ** 0.5
    P = p / p.sum()
    w = (5 * P) ** -0.4
    assert np.allclose(draw.weights, w[draw.positions] / w.max(), rtol=1e-6)
    assert set(draw.positions.tolist()) <= set(range(5))
    # new transitions get the highest priority seen so far
    sampler.added(np.array([5]))
    assert sampler.tree.get([5])[0] == pytest.approx((9.0 + 1e-6) ** 0.5)


def _slot(gamma_rewards: np.ndarray) -> dict[str, np.ndarray]:
    T, B = gamma_rewards.shape
    obs = np.arange((T + 1) * B, dtype=np.float32).reshape(T + 1, B, 1) * 10  # obs[t, b] = 10 (t B + b)
    return {"obs": obs, "actions": np.zeros((T, B), np.int64), "rewards": gamma_rewards.astype(np.float32),
            "terminated": np.zeros((T, B), np.uint8), "truncated": np.zeros((T, B), np.uint8),
            "final_obs": np.full((1, 1), -7.0, np.float32), "final_at": np.array([-1], np.int32)}


def test_n_step_targets_match_a_hand_computation():
    g = 0.9
    rewards = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0], [5.0, 50.0]])
    part = _slot(rewards)
    part["terminated"][1, 0] = 1  # env 0's episode ends after step 1
    part["truncated"][2, 1] = 1  # env 1's is cut by a time limit after step 2; its final obs is kept
    part["final_obs"][0] = -7.0
    part["final_at"][0] = 2 * 2 + 1
    tr = slot_transitions(part, n=3, gamma=g)
    got = {(t, b): (tr.rewards[t * 2 + b], tr.next_obs[t * 2 + b, 0], tr.discounts[t * 2 + b])
           for t in range(5) for b in range(2)}
    o = lambda t, b: 10.0 * (t * 2 + b)  # noqa: E731
    hand = {
        (0, 0): (1 + g * 2, o(2, 0), 0.0),  # terminated after step 1: no bootstrap
        (1, 0): (2.0, o(2, 0), 0.0),
        (2, 0): (3 + g * 4 + g * g * 5, o(5, 0), g ** 3),
        (3, 0): (4 + g * 5, o(5, 0), g ** 2),  # the slot ends: a 2-step target from obs[T]
        (4, 0): (5.0, o(5, 0), g),
        (0, 1): (10 + g * 20 + g * g * 30, -7.0, g ** 3),  # cut after step 2: bootstrap from the final obs
        (1, 1): (20 + g * 30, -7.0, g ** 2),
        (2, 1): (30.0, -7.0, g),
        (3, 1): (40 + g * 50, o(5, 1), g ** 2),
        (4, 1): (50.0, o(5, 1), g),
    }
    for key, (ret, nxt, disc) in hand.items():
        assert got[key][0] == pytest.approx(ret, rel=1e-6), key
        assert got[key][1] == nxt, key
        assert got[key][2] == pytest.approx(disc, rel=1e-6), key
    assert np.array_equal(tr.obs[:, 0], part["obs"][:5].reshape(-1))


def test_a_cut_episode_without_its_final_observation_ends_as_terminated():
    part = _slot(np.ones((3, 1)))
    part["truncated"][0, 0] = 1
    tr = slot_transitions(part, n=2, gamma=0.5)
    assert tr.discounts.tolist() == [0.0, 0.25, 0.5] and tr.rewards.tolist() == [1.0, 1.5, 1.0]


def test_store_overwrites_oldest_first():
    store = TransitionStore(numpy_arrays(store_shapes(4, (1,), "float32", (), "int64")))
    positions = store.add(slot_transitions(_slot(np.arange(3.0)[:, None]), 1, 0.9))
    assert positions.tolist() == [0, 1, 2] and store.size == 3
    positions = store.add(slot_transitions(_slot(np.arange(3.0, 6.0)[:, None]), 1, 0.9))
    assert positions.tolist() == [3, 0, 1] and store.size == 4 and store.added == 6
    assert store.read(np.arange(4))["rewards"].tolist() == [4.0, 5.0, 2.0, 3.0]
    # positions 0 and 1 now hold transitions 4 and 5: a priority computed for transitions 0 and 1 is not theirs
    assert store.current(np.array([0, 1, 2]), np.array([0, 5, 2])).tolist() == [False, True, True]
    with pytest.raises(IndexError):
        store.read(np.array([4]))


def test_several_minibatches_drawn_at_once_are_each_stratified_and_weighted_exactly():
    n = 64
    sampler = PrioritizedSampler(n, alpha=0.6, beta=0.4, seed=2)
    sampler.added(np.arange(n))  # all equally likely: stratum i of a 64-draw minibatch is position i
    assert (sampler.draw(n, 64, count=5).positions.reshape(5, 64) == np.arange(64)).all()
    errors = np.random.default_rng(1).uniform(0.05, 3.0, 16)
    sampler = PrioritizedSampler(16, alpha=0.7, beta=0.5, seed=3)
    sampler.update(np.arange(16), errors)
    counts = np.zeros(16)
    for _ in range(125):
        draw = sampler.draw(16, 64, count=8)
        assert draw.positions.shape == draw.weights.shape == (8 * 64,)
        np.add.at(counts, draw.positions, 1)
    p = (errors + sampler.eps) ** 0.7
    expected = 64_000 * p / p.sum()
    assert ((counts - expected) ** 2 / expected).sum() < CHI2_15_999
    w = (16 * p / p.sum()) ** -0.5
    assert np.allclose(draw.weights, w[draw.positions] / w.max(), rtol=1e-6)
    assert UniformSampler(10, seed=0).draw(10, 32, count=3).positions.shape == (96,)


def test_a_request_for_several_minibatches_gets_what_the_ratio_allows_and_no_more():
    """Served in one go, a request gets exactly the draws that requests of one minibatch each, served one after
    another, would have got: none before learning_starts, never past the ratio, at least one when one is allowed."""
    starts, r = 100, 0.25
    ratio = ReplayRatio(starts, r)
    assert ratio.draws_allowed(size=99, added=99, served=0, most=16) == 0
    assert ratio.draws_allowed(size=100, added=100, served=0, most=16) == 1  # one draw at learning_starts
    assert ratio.draws_allowed(size=100, added=120, served=1, most=16) == 5  # then 0.25 per transition added
    assert ratio.draws_allowed(size=100, added=120, served=1, most=3) == 3
    rng = np.random.default_rng(0)
    served = added = answers = 0
    for _ in range(3_000):
        added += int(rng.integers(0, 40))
        size, most = min(added, 500), int(rng.integers(1, 17))
        one_by_one = 0
        while one_by_one < most and size >= starts and served + one_by_one < 1 + r * (added - starts):
            one_by_one += 1
        n = ratio.draws_allowed(size, added, served, most)
        assert n == one_by_one, (size, added, served, most)
        served += n
        answers += n > 0
        assert served == 0 or served - 1 < 1 + r * (added - starts)  # the last draw served was allowed
        assert not ratio.behind(size, added, served) or n == most  # behind only where the request was too small
    assert served > 2 * answers  # most requests carried several minibatches


def test_batches_per_request_are_the_updates_one_slot_allows_unless_given():
    assert batches_per_request(0, 0.25, 128) == AUTO_MAX_BATCHES  # 32 updates a slot, capped
    assert batches_per_request(0, 0.05, 64) == 4  # 3.2 updates a slot
    assert batches_per_request(0, 0.001, 64) == 1
    assert batches_per_request(5, 0.25, 128) == 5


def test_replay_batches_per_request_is_checked():
    from daskrl.config import Config
    from daskrl.errors import ConfigError

    for bad in (-1, 65):
        with pytest.raises(ConfigError, match="replay.batches.per.request"):
            Config.from_flat({"algo": "dqn", "replay_batches_per_request": bad}).validate()
    Config.from_flat({"algo": "dqn", "replay_batches_per_request": 8}).validate()


def test_a_store_reads_a_minibatch_straight_into_a_block():
    store = TransitionStore(numpy_arrays(store_shapes(8, (2,), "float32", (), "int64")))
    store.add(slot_transitions(_slot(np.arange(6.0)[:, None]), 1, 0.9))
    positions = np.array([5, 0, 3, 3])
    block = numpy_arrays(store_shapes(4, (2,), "float32", (), "int64"))
    store.read_into(positions, block)
    for name, values in store.read(positions).items():
        assert np.array_equal(block[name], values), name
    with pytest.raises(IndexError):
        store.read_into(np.array([6]), block)
