"""The offline learners' parts without a run (daskrl/algo/bc, iql, cql): their losses against values computed here by
hand, behavior cloning fitting a fixed expert, IQL and CQL training a tiny dataset (CQL's critic ending lower off the
data than on it), a checkpoint resuming to the same next update, a minibatch that is not finite skipped, and the
actor's own learning rate kept under the schedule."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from daskrl.algo.bc.trainer import BCTrainer
from daskrl.algo.common.replay_steps import ReplayTrainer
from daskrl.algo.cql.loss import conservative_penalty
from daskrl.algo.cql.trainer import CQLTrainer
from daskrl.algo.iql.loss import awr_weights, expectile_loss
from daskrl.algo.iql.trainer import IQLTrainer
from daskrl.algo.td3.trainer import deterministic_action
from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
from daskrl.envs import probe_env
from daskrl.models.actor_critic import build_model

#: BC's and IQL's actor (TD3's form: the tanh-squashed mean, one state-independent log-std), CQL's (SAC's)
MEAN_ACTOR = ModelConfig(hidden_sizes=[32, 32], action_bounds="squash_mean", gaussian_std="parameter")
SAC_ACTOR = ModelConfig(hidden_sizes=[32, 32], action_bounds="squash", gaussian_std="state")
LEARNER = LearnerConfig(learning_rate=1e-3, max_grad_norm=0.0)


def pendulum_bc(seed: int = 0) -> BCTrainer:
    return BCTrainer(build_model(probe_env("Pendulum-v1"), MEAN_ACTOR, seed), LEARNER)


def pendulum_iql(seed: int = 0) -> IQLTrainer:
    torch.manual_seed(seed)
    return IQLTrainer(build_model(probe_env("Pendulum-v1"), MEAN_ACTOR, seed), MEAN_ACTOR, LEARNER,
                      AlgoConfig(n_step=1))


def pendulum_cql(seed: int = 0, learner: LearnerConfig = LEARNER, **algo: float) -> CQLTrainer:
    torch.manual_seed(seed)
    return CQLTrainer(build_model(probe_env("Pendulum-v1"), SAC_ACTOR, seed), SAC_ACTOR, learner,
                      AlgoConfig(n_step=1, **algo))


def dataset_minibatch(seed: int, size: int = 64) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Pendulum-shaped rows whose actions sit in [-0.2, 0.2] (the data), with rewards that grow with the action: a
    critic without CQL's penalty extrapolates them and values the action 1.8 above the data (about 3 against 1)."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (size, 3)).astype(np.float32)
    actions = rng.uniform(-0.2, 0.2, (size, 1)).astype(np.float32)
    data = {"obs": obs, "actions": actions, "rewards": (obs[:, 0] + 2 * actions[:, 0]).astype(np.float32),
            "next_obs": np.clip(obs + rng.normal(0, 0.1, obs.shape), -1, 1).astype(np.float32),
            "discounts": np.full(size, 0.9, np.float32)}
    return data, np.ones(size, np.float32)


def stacked(minibatches: list[tuple[dict[str, np.ndarray], np.ndarray]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """K minibatches as one learner request ([K, B, ...] per field)."""
    fields = minibatches[0][0]
    return {k: np.stack([b[k] for b, _ in minibatches]) for k in fields}, np.stack([w for _, w in minibatches])


def snapshot(trainer: ReplayTrainer) -> list[torch.Tensor]:
    return [p.detach().clone() for optimizer in trainer.optimizers() for g in optimizer.param_groups
            for p in g["params"]]


# ---- the losses, by hand ----

def test_the_expectile_loss_weighs_positive_residuals_by_tau_and_negative_ones_by_one_minus_tau():
    residuals = torch.tensor([2.0, -1.0, 0.5, -3.0])
    want = (0.7 * 4.0 + 0.3 * 1.0 + 0.7 * 0.25 + 0.3 * 9.0) / 4
    assert expectile_loss(residuals, 0.7, torch.ones(4)).item() == pytest.approx(want, rel=1e-6)
    weights = torch.tensor([2.0, 1.0, 0.0, 1.0])
    want = (2 * 0.7 * 4.0 + 0.3 * 1.0 + 0.3 * 9.0) / 4
    assert expectile_loss(residuals, 0.7, weights).item() == pytest.approx(want, rel=1e-6)
    assert expectile_loss(residuals, 0.5, torch.ones(4)).item() == pytest.approx(0.5 * (4 + 1 + 0.25 + 9) / 4)


def test_the_awr_weights_are_exp_beta_advantage_clipped_at_the_max():
    advantages = torch.tensor([0.0, 1.0, -1.0, 10.0, 1000.0])
    got = awr_weights(advantages, temperature=3.0, max_weight=100.0)
    assert got.tolist() == pytest.approx([1.0, math.exp(3.0), math.exp(-3.0), 100.0, 100.0], rel=1e-6)
    assert not got.requires_grad


def test_the_cql_penalty_is_the_hand_computed_logsumexp_and_grows_with_values_off_the_data():
    sampled = torch.tensor([[1.0, 2.0, 0.0], [0.5, 0.5, 0.5]])
    log_density = torch.tensor([[0.0, math.log(2.0), -1.0], [0.0, 0.0, 0.0]])
    data = torch.tensor([0.5, 1.0])
    rows = [math.log(math.exp(1.0) + math.exp(2.0 - math.log(2.0)) + math.exp(1.0)) - 0.5,
            math.log(3 * math.exp(0.5)) - 1.0]
    got = conservative_penalty(sampled, log_density, data, torch.ones(2))
    assert got.item() == pytest.approx(sum(rows) / 2, rel=1e-6)
    overvalued = conservative_penalty(sampled + torch.tensor([[0.0, 3.0, 0.0], [0.0, 0.0, 3.0]]), log_density, data,
                                      torch.ones(2))
    assert overvalued.item() > got.item() + 1.0  # the critic that overvalues actions away from the data pays more


# ---- behavior cloning ----

def test_bc_fits_a_linear_expert_on_box_actions():
    trainer = pendulum_bc()
    expert = np.array([[0.5], [-0.3], [0.2]], np.float32)
    rng = np.random.default_rng(0)
    held_out = rng.uniform(-1, 1, (512, 3)).astype(np.float32)

    def error() -> float:
        with torch.no_grad():
            modes = deterministic_action(trainer.model, torch.as_tensor(held_out)).numpy()
        return float(np.square(modes - held_out @ expert).mean())

    before = error()
    for _ in range(10):
        minibatches = []
        for _ in range(30):
            obs = rng.uniform(-1, 1, (64, 3)).astype(np.float32)
            minibatches.append(({"obs": obs, "actions": obs @ expert}, np.ones(64, np.float32)))
        metrics, td, applied = trainer.train_many(*stacked(minibatches))
    assert applied.all() and not td.any() and "action_error" in metrics
    assert error() < before / 10, (before, error())


def test_bc_reaches_the_accuracy_of_a_fixed_rule_on_discrete_actions():
    trainer = BCTrainer(build_model(probe_env("CartPole-v1"), MEAN_ACTOR, 0), LEARNER)
    rng = np.random.default_rng(1)

    def rule(obs: np.ndarray) -> np.ndarray:
        return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)

    for _ in range(10):
        minibatches = []
        for _ in range(30):
            obs = rng.normal(size=(64, 4)).astype(np.float32)
            minibatches.append(({"obs": obs, "actions": rule(obs)}, np.ones(64, np.float32)))
        metrics, _, _ = trainer.train_many(*stacked(minibatches))
    held_out = rng.normal(size=(1000, 4)).astype(np.float32)
    actions, _, _ = trainer.model.act(held_out, deterministic=True)
    assert float((actions == rule(held_out)).mean()) > 0.95
    assert metrics["accuracy"] > 0.9 and metrics["loss"] < 0.3


# ---- IQL and CQL on a tiny dataset ----

def test_iql_trains_a_tiny_dataset_and_stays_finite():
    trainer = pendulum_iql()
    for request in range(6):
        metrics, td, applied = trainer.train_many(*stacked([dataset_minibatch(50 * request + k) for k in range(50)]))
        assert applied.all() and np.isfinite(td).all()
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert {"loss", "value_loss", "policy_loss", "v_mean", "q_mean"} <= set(metrics)
    assert trainer.train_steps == 300 and all(torch.isfinite(p).all() for p in snapshot(trainer))
    # V sits at an upper expectile of the target Q over the data's actions: mostly at or below it, not far off
    assert metrics["advantage_mean"] > -0.5


def test_cql_trains_a_tiny_dataset_and_values_actions_off_the_data_below_those_on_it():
    trainer = pendulum_cql()
    for request in range(6):
        metrics, td, applied = trainer.train_many(*stacked([dataset_minibatch(50 * request + k) for k in range(50)]))
        assert applied.all() and np.isfinite(td).all()
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert {"conservative_penalty", "q_mean", "alpha", "loss", "policy_loss"} <= set(metrics)
    data, _ = dataset_minibatch(999, 256)
    inputs = trainer.model.prepare(torch.as_tensor(data["obs"]))[0]
    with torch.no_grad():
        on_data = torch.minimum(*trainer.critics(inputs, torch.as_tensor(data["actions"]))).mean()
        off_data = [torch.minimum(*trainer.critics(inputs, torch.full((256, 1), a))).mean() for a in (-1.8, 1.8)]
    assert all(float(q) < float(on_data) for q in off_data), (on_data, off_data)


# ---- checkpoints, skipped minibatches, the actor's rate ----

@pytest.mark.parametrize("make", [pendulum_bc, pendulum_iql, pendulum_cql], ids=["bc", "iql", "cql"])
def test_a_checkpoint_resumes_to_the_same_next_update(make):
    first = make(0)
    first.train_many(*stacked([dataset_minibatch(k) for k in range(3)]))
    second = make(5)
    # what a checkpoint saves and --resume loads: a copy, as from disk (torch's optimizers load moments without one)
    second.load_state_dict(copy.deepcopy(first.state_dict()))
    request = stacked([dataset_minibatch(7)])
    results = []
    for trainer in (first, second):
        torch.manual_seed(9)
        metrics, td, _ = trainer.train_many(*request)
        results.append((metrics, td, snapshot(trainer)))
    assert results[0][0] == results[1][0] and np.array_equal(results[0][1], results[1][1])
    assert all(torch.equal(a, b) for a, b in zip(results[0][2], results[1][2], strict=True))


@pytest.mark.parametrize(("make", "field"), [(pendulum_iql, "rewards"), (pendulum_cql, "rewards"),
                                             (pendulum_bc, "actions")], ids=["iql", "cql", "bc"])
def test_a_minibatch_that_is_not_finite_is_skipped_and_moves_nothing(make, field):
    trainer = make()
    data, weights = dataset_minibatch(3)
    data[field][5] = np.nan
    before = snapshot(trainer)
    metrics, td = trainer.train(data, weights)
    assert metrics["skipped_updates"] == 1 and metrics["updates"] == 0 and not td.any()
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(trainer), strict=True))
    assert trainer.train_steps == 0


def test_cql_steps_its_actor_at_its_own_rate_through_the_schedule_and_a_resume():
    learner = LearnerConfig(learning_rate=3e-4, max_grad_norm=0.0, lr_schedule="linear")
    trainer = pendulum_cql(learner=learner, actor_learning_rate=1e-4)
    trainer.train_many(*stacked([dataset_minibatch(0)]), env_steps=500, total_env_steps=1000)  # half the budget
    rates = [optimizer.param_groups[0]["lr"] for optimizer in trainer.optimizers()]
    assert rates == pytest.approx([0.5e-4, 1.5e-4, 0.5e-4])  # actor, critics, temperature
    resumed = pendulum_cql(seed=1, learner=learner, actor_learning_rate=2e-4)
    resumed.load_state_dict(trainer.state_dict())
    resumed.train_many(*stacked([dataset_minibatch(1)]))
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(2e-4)  # the resuming run's option wins
    resumed.set_hyperparams({"learning_rate": 6e-4})  # steered (run.set, PBT): the actor keeps its ratio to it
    resumed.train_many(*stacked([dataset_minibatch(2)]))
    rates = [optimizer.param_groups[0]["lr"] for optimizer in resumed.optimizers()]
    assert rates == pytest.approx([4e-4, 6e-4, 4e-4])


def test_iql_and_cql_refuse_discrete_actions():
    cartpole = probe_env("CartPole-v1")
    with pytest.raises(ValueError, match="Box actions"):
        IQLTrainer(build_model(cartpole, MEAN_ACTOR, 0), MEAN_ACTOR, LEARNER, AlgoConfig())
    with pytest.raises(ValueError, match="Box actions"):
        CQLTrainer(build_model(cartpole, SAC_ACTOR, 0), SAC_ACTOR, LEARNER, AlgoConfig())
