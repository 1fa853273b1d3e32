"""SAC's parts without a run: its losses against references computed here by hand, the soft update, the squashed
Gaussian's log-probability, what it refuses, several minibatches in one call, and its critics' layout (one MLP of
observation and action, and a checkpoint of the earlier layout resumes into that layout)."""

from __future__ import annotations

import math
from operator import attrgetter

import pytest
import torch
from torch import nn

from daskrl.algo.sac.loss import actor_loss, alpha_loss, critic_loss, sac_targets, soft_update

from ..helpers import run_config


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B = 5

    def r() -> torch.Tensor:
        return torch.randn(B, generator=g, dtype=torch.float64)

    return {"q1": r().requires_grad_(), "q2": r().requires_grad_(), "rewards": r(), "next_q1": r(), "next_q2": r(),
            "next_log_prob": r(), "q1_pi": r(), "q2_pi": r(), "log_prob": r(),
            "discounts": torch.tensor([0.99, 0.0, 0.99, 0.9801, 0.99], dtype=torch.float64),
            "weights": torch.rand(B, generator=g, dtype=torch.float64) + 0.5}


def test_sac_critic_loss_matches_a_hand_computation():
    b, alpha = _batch(), 0.3
    targets = sac_targets(b["rewards"], b["discounts"], b["next_q1"], b["next_q2"], b["next_log_prob"], alpha)
    out = critic_loss(b["q1"], b["q2"], targets, b["weights"])
    total, errors = 0.0, []
    for i in range(5):
        soft_next = min(b["next_q1"][i].item(), b["next_q2"][i].item()) - alpha * b["next_log_prob"][i].item()
        y = b["rewards"][i].item() + b["discounts"][i].item() * soft_next
        e1, e2 = y - b["q1"][i].item(), y - b["q2"][i].item()
        total += b["weights"][i].item() * (e1 * e1 + e2 * e2) / 2
        errors.append((e1 + e2) / 2)
    assert out.loss.item() == pytest.approx(total / 5, rel=1e-12)
    assert out.td_errors.tolist() == pytest.approx(errors, rel=1e-12)
    out.loss.backward()
    assert b["q1"].grad is not None and b["q2"].grad is not None


def test_sac_actor_and_temperature_losses_match_a_hand_computation():
    b, alpha = _batch(2), 0.2
    want = sum(alpha * b["log_prob"][i].item() - min(b["q1_pi"][i].item(), b["q2_pi"][i].item())
               for i in range(5)) / 5
    assert actor_loss(b["q1_pi"], b["q2_pi"], b["log_prob"], alpha).item() == pytest.approx(want, rel=1e-12)
    log_alpha = torch.tensor(math.log(alpha), dtype=torch.float64, requires_grad=True)
    target_entropy = -2.0
    loss = alpha_loss(log_alpha, b["log_prob"], target_entropy)
    want = -sum(math.log(alpha) * (b["log_prob"][i].item() + target_entropy) for i in range(5)) / 5
    assert loss.item() == pytest.approx(want, rel=1e-12)
    loss.backward()  # entropy (-log_prob) above the target: alpha goes down (gradient of log alpha is positive)
    assert log_alpha.grad.item() == pytest.approx(-(b["log_prob"].mean().item() + target_entropy), rel=1e-12)


def test_soft_update_moves_targets_by_tau():
    torch.manual_seed(0)
    online, target = nn.Linear(3, 2), nn.Linear(3, 2)
    before = target.weight.detach().clone()
    soft_update(target, online, 0.05)
    assert torch.allclose(target.weight, 0.95 * before + 0.05 * online.weight.detach())
    soft_update(target, online, 1.0)
    assert torch.equal(target.weight, online.weight)


def test_a_squashed_sample_has_the_log_probability_torch_distributions_give_it():
    """The reparameterized squashed-Gaussian sample against torch.distributions' own tanh-and-scale transform."""
    import gymnasium as gym
    import numpy as np
    from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

    from daskrl.algo.sac.trainer import squashed_sample
    from daskrl.config import ModelConfig
    from daskrl.envs.layouts.spaces import EnvSpaces
    from daskrl.models.actor_critic import build_model

    spaces = EnvSpaces.from_spaces(gym.spaces.Box(-1, 1, (3,), np.float32),
                                   gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)))
    actor = build_model(spaces, ModelConfig(action_bounds="squash", gaussian_std="state", init_log_std=-0.5), 0)
    obs = torch.randn(64, 3)
    actions, log_prob = squashed_sample(actor, obs)
    dist = actor(obs)[0]
    reference = TransformedDistribution(Normal(dist.mean, dist.log_std.exp()),
                                        [TanhTransform(), AffineTransform(dist.center, dist.half)])
    inside = (((actions - dist.center) / dist.half).abs() < 0.999).all(-1)  # where float32 tanh is invertible
    assert inside.sum() > 48
    assert torch.allclose(log_prob[inside], reference.log_prob(actions).sum(-1)[inside], atol=1e-3)
    assert (actions >= torch.tensor([-2.0, 0.0])).all() and (actions <= torch.tensor([2.0, 1.0])).all()
    log_prob.sum().backward()  # reparameterized: the actor's mean and std heads get gradients
    assert actor.actor.mean.weight.grad is not None and actor.actor.log_std_head.weight.grad is not None


def test_sac_refuses_discrete_actions_and_an_unsquashed_gaussian(tmp_path):
    from daskrl.config import Config
    from daskrl.driver.launch.preflight import preflight
    from daskrl.errors import ConfigError

    with pytest.raises(ConfigError, match="--algo sac needs box actions, and this env's are discrete"):
        preflight(run_config(tmp_path, algo="sac", env="CartPole-v1"))
    with pytest.raises(ConfigError, match="leave out --action-bounds clip"):
        Config.from_flat({"algo": "sac", "action_bounds": "clip"}).validate()
    config = run_config(tmp_path, algo="sac", env="Pendulum-v1")
    preflight(config)  # sets the actor SAC needs; an APPO run keeps its own
    assert (config.model.action_bounds, config.model.gaussian_std) == ("squash", "state")
    assert not config.learner.sync and config.learner.gamma == 0.99  # Pendulum's family settings (gamma 0.95) are APPO's
    appo = run_config(tmp_path, env="Pendulum-v1")
    preflight(appo)
    assert (appo.model.action_bounds, appo.model.gaussian_std) == ("clip", "parameter")


def test_several_minibatches_in_one_call_train_exactly_as_one_call_each():
    """The learner trains a request's K minibatches in one call: the same updates, bit for bit, as K calls of one
    (the same random actions drawn in the same order, target critics moved after each)."""
    import numpy as np

    from daskrl.algo.sac.trainer import SACTrainer
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.envs import probe_env
    from daskrl.models.actor_critic import build_model

    spaces, rng, K, B = probe_env("Pendulum-v1"), np.random.default_rng(0), 4, 16
    batches = {"obs": rng.normal(size=(K, B, 3)).astype(np.float32),
               "actions": rng.uniform(-2, 2, (K, B, 1)).astype(np.float32),
               "rewards": rng.normal(size=(K, B)).astype(np.float32),
               "next_obs": rng.normal(size=(K, B, 3)).astype(np.float32), "discounts": np.full((K, B), 0.99, np.float32)}
    weights = rng.uniform(0.1, 1.0, (K, B)).astype(np.float32)
    model_cfg = ModelConfig(hidden_sizes=[32, 32], action_bounds="squash", gaussian_std="state")

    def trainer() -> SACTrainer:
        torch.manual_seed(0)
        return SACTrainer(build_model(spaces, model_cfg, 0), model_cfg, LearnerConfig(learning_rate=3e-4, max_grad_norm=0.0),
                          AlgoConfig(algo="sac", n_step=1))

    one = trainer()
    singles = [one.train({k: v[i] for k, v in batches.items()}, weights[i])[1] for i in range(K)]
    many = trainer()
    _, td, applied = many.train_many(batches, weights)
    assert applied.all() and np.array_equal(td, np.stack(singles))
    for part in ("model", "critics.net", "critics.target"):
        for a, b in zip(attrgetter(part)(one).state_dict().values(), attrgetter(part)(many).state_dict().values(),
                        strict=True):
            assert torch.equal(a, b), part
    assert one.log_alpha.item() == many.log_alpha.item()


def _pendulum_trainer(**critic_layout):
    from daskrl.algo.sac.trainer import SACTrainer
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.envs import probe_env
    from daskrl.models.actor_critic import build_model

    model_cfg = ModelConfig(hidden_sizes=[32, 32], action_bounds="squash", gaussian_std="state", activation="relu")
    trainer = SACTrainer(build_model(probe_env("Pendulum-v1"), model_cfg, 0), model_cfg, LearnerConfig(),
                         AlgoConfig(algo="sac", n_step=1))
    if critic_layout:
        trainer.critics = trainer._new_critics(**critic_layout)
    return trainer


def test_mlp_critics_are_one_mlp_of_observation_and_action_as_the_papers():
    """Each critic of vector observations is Linear(obs + action -> 32), Linear(32 -> 32), Linear(32 -> 1): the
    actor's hidden sizes, two hidden layers (SB3's and CleanRL's critics), not an observation encoder and one layer
    more. Image observations keep an encoder of their own before [features, action]."""
    from daskrl.config import ModelConfig
    from daskrl.envs import probe_env
    from daskrl.models.q_critics import TwinQ

    critics = _pendulum_trainer().critics.net
    shapes = [tuple(v.shape) for k, v in critics.state_dict().items() if k.startswith(("encoders.0.", "heads.0."))
              and k.endswith("weight")]
    assert critics.joint and shapes == [(32, 4), (32, 32), (1, 32)]
    q1, q2 = critics(torch.randn(5, 3), torch.randn(5, 1))
    assert q1.shape == q2.shape == (5,) and not torch.equal(q1, q2)  # two critics, initialized apart
    frames = TwinQ(probe_env("daskrl/Catch-v0"), ModelConfig())
    assert not frames.joint and any(k.startswith("heads.0.0.") for k in frames.state_dict())


def test_a_checkpoint_with_critics_of_the_earlier_layout_resumes_into_that_layout():
    """Experiments saved before the MLP critics became one MLP hold an encoder and a head per critic: loading one
    builds critics of that layout (with their targets and optimizer), and they train on."""
    import numpy as np

    old = _pendulum_trainer(joint=False)
    state = old.own_state()
    assert any(k.startswith("heads.0.0.") for k in state["critics"])
    resumed = _pendulum_trainer()
    resumed.load_own_state(state)
    assert not resumed.critics.joint
    for a, b in zip(resumed.critics.target.state_dict().values(), old.critics.target.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)
    rng = np.random.default_rng(0)
    batch = {"obs": rng.normal(size=(8, 3)).astype(np.float32), "actions": rng.uniform(-2, 2, (8, 1)).astype(np.float32),
             "rewards": rng.normal(size=8).astype(np.float32), "next_obs": rng.normal(size=(8, 3)).astype(np.float32),
             "discounts": np.full(8, 0.99, np.float32)}
    before = [p.detach().clone() for p in resumed.critics.params]
    assert resumed.train(batch, np.ones(8, np.float32))[0]["updates"] == 1
    assert all(p is q for p, q in zip(resumed.critics.optimizer.param_groups[0]["params"],
                                      resumed.critics.net.parameters(), strict=True))
    assert any(not torch.equal(b, p) for b, p in zip(before, resumed.critics.net.parameters(), strict=True))
