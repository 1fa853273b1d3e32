"""TD3's parts without a run (daskrl/algo/td3/trainer.py): target policy smoothing stays in the box and within its
clip, the actor and the targets move only every --policy-delay critic updates, the exploration noise (the actor's
log-std) is never trained, a checkpoint resumes to the same trainer, and the options TD3 refuses or sets."""

from __future__ import annotations

from operator import attrgetter

import numpy as np
import pytest
import torch

from daskrl.algo.td3.trainer import TD3Trainer, deterministic_action, smoothed_target_action
from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
from daskrl.envs import probe_env
from daskrl.models.actor_critic import build_model

from ..helpers import run_config

MODEL = ModelConfig(hidden_sizes=[32, 32], action_bounds="squash_mean", gaussian_std="parameter", init_log_std=-2.302585,
                    activation="relu")


def pendulum_trainer(seed: int = 0) -> TD3Trainer:
    torch.manual_seed(seed)
    return TD3Trainer(build_model(probe_env("Pendulum-v1"), MODEL, seed), MODEL,
                      LearnerConfig(learning_rate=1e-3, max_grad_norm=0.0), AlgoConfig(algo="td3", n_step=1))


def minibatch(seed: int, size: int = 32) -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    data = {"obs": rng.normal(size=(size, 3)).astype(np.float32),
            "actions": rng.uniform(-2, 2, (size, 1)).astype(np.float32),
            "rewards": rng.normal(size=size).astype(np.float32),
            "next_obs": rng.normal(size=(size, 3)).astype(np.float32), "discounts": np.full(size, 0.99, np.float32)}
    return data, np.ones(size, np.float32)


def test_target_smoothing_stays_in_the_box_and_within_its_clip():
    actor = pendulum_trainer().target_actor
    obs = torch.randn(2000, 3)
    mode = deterministic_action(actor, obs)
    smoothed = smoothed_target_action(actor, obs, noise=10.0, clip=0.5)  # a wide noise: the clip decides
    assert float((smoothed - mode).abs().max()) <= 0.5 * 2.0 + 1e-6  # half a half-width of Pendulum's [-2, 2]
    assert float(smoothed.abs().max()) <= 2.0 and float((smoothed - mode).abs().max()) > 0.5
    quiet = smoothed_target_action(actor, obs, noise=0.2, clip=0.5)
    assert 0.3 < float((quiet - mode).std()) < 0.5  # std 0.2 half-widths = 0.4 in Pendulum's units, barely clipped


def test_the_actor_and_the_targets_move_every_second_update_and_the_noise_never():
    trainer = pendulum_trainer()
    log_std = trainer.model.actor.log_std.detach().clone() if hasattr(trainer.model.actor, "log_std") else None
    snapshot = lambda module: [p.detach().clone() for p in module.parameters()]  # noqa: E731
    actor, target_actor = snapshot(trainer.model), snapshot(trainer.target_actor)
    target = snapshot(trainer.critics.target)

    def moved(before: list[torch.Tensor], module: torch.nn.Module) -> bool:
        return any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))

    trainer.train(*minibatch(1))
    assert not moved(actor, trainer.model) and not moved(target_actor, trainer.target_actor)
    assert not moved(target, trainer.critics.target)  # the critics moved; their targets wait for the actor's update
    trainer.train(*minibatch(2))
    assert moved(actor, trainer.model) and moved(target_actor, trainer.target_actor)
    assert moved(target, trainer.critics.target)
    noise = [p for name, p in trainer.model.named_parameters() if "log_std" in name]
    assert noise and all(torch.allclose(p, torch.full_like(p, -2.302585)) for p in noise), "the noise was trained"
    assert log_std is None or torch.equal(log_std, trainer.model.actor.log_std)


def test_a_checkpoint_resumes_to_the_same_trainer():
    first = pendulum_trainer()
    for seed in range(3):
        first.train(*minibatch(seed))
    second = pendulum_trainer(seed=5)
    second.load_state_dict(first.state_dict())  # what a checkpoint saves and --resume loads
    for part in ("model", "target_actor", "critics.net", "critics.target"):
        for a, b in zip(attrgetter(part)(first).state_dict().values(), attrgetter(part)(second).state_dict().values(),
                        strict=True):
            assert torch.equal(a, b), part
    data, weights = minibatch(7)
    one_request = ({k: v[None] for k, v in data.items()}, weights[None])  # K = 1 minibatch
    torch.manual_seed(9)
    _, td_first, _ = first.train_many(*one_request)
    torch.manual_seed(9)
    _, td_second, _ = second.train_many(*one_request)
    assert np.array_equal(td_first, td_second)


def test_td3_sets_its_actor_and_refuses_what_it_cannot_use(tmp_path):
    from daskrl.config import Config
    from daskrl.driver.launch.preflight import preflight
    from daskrl.errors import ConfigError

    with pytest.raises(ConfigError, match="--algo td3 needs box actions, and this env's are discrete"):
        preflight(run_config(tmp_path, algo="td3", env="CartPole-v1"))
    with pytest.raises(ConfigError, match="--algo td3 explores with one fixed noise .*: leave out --gaussian-std state"):
        Config.from_flat({"algo": "td3", "gaussian_std": "state"}).validate()
    with pytest.raises(ConfigError, match="--algo td3 bounds its actions as --action-bounds squash_mean does: leave "
                                          "out --action-bounds clip"):
        Config.from_flat({"algo": "td3", "action_bounds": "clip"}).validate()
    config = run_config(tmp_path, algo="td3", env="Pendulum-v1")
    preflight(config)
    assert (config.model.action_bounds, config.model.gaussian_std) == ("squash_mean", "parameter")
    assert config.algo.learning_starts == 10_000  # rl-zoo's, with uniformly random actions until then
    assert config.model.init_log_std == pytest.approx(np.log(0.1)) and config.model.hidden_sizes == [400, 300]
    mine = run_config(tmp_path, algo="td3", env="Pendulum-v1", init_log_std=-1.0)
    preflight(mine)
    assert mine.model.init_log_std == -1.0  # a noise the user gives wins


def test_the_exploration_noise_comes_after_the_squash_so_a_saturated_actor_still_explores():
    from daskrl.models.heads import ClippedGaussian, SquashedMeanNoise

    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    mean = torch.tensor([[20.0, 0.0]]).expand(20_000, 2)  # dimension 0 far past tanh's bound
    dist = SquashedMeanNoise(mean, torch.full((2,), np.log(0.1)), low, high)
    assert torch.allclose(dist.mode()[0], torch.tensor([2.0, 0.5]))  # tanh(mean) in the box's units
    actions = dist.sample()
    assert float(actions.min()) >= -2.0 and float(actions[:, 1].max()) <= 1.0
    below_the_bound = actions[:, 0] < 2.0
    assert 0.45 < float(below_the_bound.float().mean()) < 0.55  # half the noise points back into the box
    assert float(actions[:, 1].std()) == pytest.approx(0.05, rel=0.05)  # 0.1 half-widths of [0, 1]
    clipped = ClippedGaussian(dist.mode(), torch.log(torch.tensor([0.2, 0.05])), low, high)
    assert torch.allclose(dist.log_prob(actions), clipped.log_prob(actions), atol=1e-5)


def test_td3_samplers_act_uniformly_for_their_share_of_learning_starts_then_sample_the_policy():
    from daskrl.sampling.policies.exploration import UniformWarmupActing, exploring
    from daskrl.setups import UniformWarmup

    def policy(obs, state=None, deterministic=False):  # as SamplingPolicy's act: a policy that always sends 0.25
        return np.full((len(obs), 1), 0.25, np.float32), np.zeros(len(obs), np.float32), None

    setup = UniformWarmup.for_worker(learning_starts=10_000, workers=3, low=[-2.0], high=[2.0], run_env_steps=0)
    assert setup.steps == 3_334  # each of 3 workers takes a third, rounded up
    # created later (a resume, a recovered worker): only what is left of the warm-up, nothing once it is over
    assert UniformWarmup.for_worker(10_000, 3, [-2.0], [2.0], run_env_steps=7_000).steps == 1_000
    assert UniformWarmup.for_worker(10_000, 3, [-2.0], [2.0], run_env_steps=12_000).steps == 0
    act = exploring(policy, setup, seed=0)
    assert isinstance(act, UniformWarmupActing)
    warmup = np.concatenate([act(np.zeros((8, 3)))[0] for _ in range(417)])  # 3,336 steps: the share, then a call
    assert warmup.shape == (3_336, 1) and warmup.dtype == np.float32
    assert float(warmup.min()) >= -2.0 and float(warmup.max()) <= 2.0 and abs(float(warmup.mean())) < 0.1
    assert float(warmup.std()) == pytest.approx(4 / np.sqrt(12), rel=0.05)  # uniform over [-2, 2]
    after = act(np.zeros((8, 3)))[0]
    assert np.all(after == 0.25)  # the policy's own actions once the share is taken


def test_sac_and_td3_refuse_an_action_box_with_an_infinite_bound():
    import gymnasium as gym

    from daskrl.config.algo_options import algo_space_problems
    from daskrl.envs.layouts.spaces import EnvSpaces

    obs = gym.spaces.Box(-1.0, 1.0, (3,))
    open_box = EnvSpaces.from_spaces(obs, gym.spaces.Box(-np.inf, np.inf, (2,)))
    closed_box = EnvSpaces.from_spaces(obs, gym.spaces.Box(-2.0, 2.0, (2,)))
    assert not open_box.box_is_bounded() and closed_box.box_is_bounded()
    for algo in ("sac", "td3"):
        [problem] = algo_space_problems(algo, ("box",), "box", open_box.box_is_bounded())
        assert f"--algo {algo} squashes its actions into the action Box" in problem and "infinite bound" in problem
        assert algo_space_problems(algo, ("box",), "box", closed_box.box_is_bounded()) == []
    assert algo_space_problems("appo", ("box",), "box", False) == []  # APPO's Gaussian needs no bounds
