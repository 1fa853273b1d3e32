"""DQN's parts without a run: its loss against a reference computed here by hand, one sample at a time (double Q,
dueling); each rollout worker's epsilon-greedy exploration; what it refuses and the defaults of its own; and its
trainer on Dict observations with an action mask, on Atari-sized frames and on MountainCar, with several
minibatches in one call, and refusing the weights of another network."""

from __future__ import annotations

import pytest
import torch

from daskrl.algo.dqn.loss import dqn_loss, dqn_targets, dueling

from ..helpers import run_config


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B, A = 6, 3
    return {
        "q": torch.randn(B, A, generator=g, dtype=torch.float64, requires_grad=True),
        "actions": torch.tensor([0, 2, 1, 1, 0, 2]),
        "rewards": torch.randn(B, generator=g, dtype=torch.float64) * 3,
        "discounts": torch.tensor([0.99, 0.0, 0.9801, 0.99, 0.970299, 0.0], dtype=torch.float64),
        "next_online": torch.randn(B, A, generator=g, dtype=torch.float64),
        "next_target": torch.randn(B, A, generator=g, dtype=torch.float64),
        "weights": torch.rand(B, generator=g, dtype=torch.float64) + 0.1,
    }


def _reference(b: dict[str, torch.Tensor], double: bool, delta: float) -> tuple[float, list[float]]:
    """Per sample: the target, the TD error and its Huber loss, in plain Python."""
    total, errors = 0.0, []
    for i in range(len(b["actions"])):
        online, target = b["next_online"][i].tolist(), b["next_target"][i].tolist()
        picker = online if double else target
        best = max(range(len(picker)), key=lambda a: picker[a])
        y = b["rewards"][i].item() + b["discounts"][i].item() * target[best]
        td = y - b["q"][i, b["actions"][i]].item()
        huber = 0.5 * td * td if abs(td) <= delta else delta * (abs(td) - 0.5 * delta)
        total += b["weights"][i].item() * huber
        errors.append(td)
    return total / len(errors), errors


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("delta", [1.0, float("inf")])
def test_dqn_loss_matches_a_hand_computation(double, delta):
    b = _batch()
    targets = dqn_targets(b["rewards"], b["discounts"], b["next_target"], b["next_online"] if double else None)
    out = dqn_loss(b["q"], b["actions"], targets, b["weights"], huber_delta=delta)
    loss, errors = _reference(b, double, delta)
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    assert out.td_errors.tolist() == pytest.approx(errors, rel=1e-12)
    out.loss.backward()  # only the taken actions' Q-values get a gradient
    grad = b["q"].grad
    untaken = torch.ones_like(grad, dtype=torch.bool).scatter_(1, b["actions"].reshape(-1, 1), False)
    assert torch.all(grad[untaken] == 0) and torch.all(grad[~untaken] != 0)


def test_double_q_differs_from_plain_where_the_networks_disagree():
    b = _batch(1)
    b["next_online"] = torch.tensor([[1.0, 0.0, 0.0]] * 6, dtype=torch.float64)
    b["next_target"] = torch.tensor([[0.0, 5.0, 0.0]] * 6, dtype=torch.float64)
    double = dqn_targets(b["rewards"], b["discounts"], b["next_target"], b["next_online"])
    plain = dqn_targets(b["rewards"], b["discounts"], b["next_target"], None)
    assert torch.allclose(double, b["rewards"]) and torch.allclose(plain, b["rewards"] + 5 * b["discounts"])


def test_dueling_combines_value_and_centered_advantages():
    v = torch.tensor([1.0, -2.0])
    a = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]])
    assert dueling(v, a).tolist() == [[0.0, 1.0, 2.0], [-3.0, -3.0, 0.0]]


def test_each_rollout_worker_explores_with_its_own_epsilon():
    from daskrl.setups import EpsilonGreedy

    eps = [EpsilonGreedy.for_worker(i, 4, 0.4, 7.0, 0.0, 0, 2, 0).final_eps for i in range(4)]
    assert eps == pytest.approx([0.4 ** (1 + 7 * i / 3) for i in range(4)])  # Ape-X: eps^(1 + alpha i / (N - 1))
    assert EpsilonGreedy.for_worker(0, 1, 0.05, 7.0, 0.0, 0, 2, 0).final_eps == pytest.approx(0.05)
    decaying = EpsilonGreedy.for_worker(0, 2, 0.1, 7.0, 0.5, 4000, 2, 0)  # half of this worker's 2,000 steps
    assert decaying.decay_steps == 1000
    assert [decaying.epsilon(s) for s in (0, 500, 1000, 5000)] == pytest.approx([1.0, 0.55, 0.1, 0.1])


def test_a_rollout_worker_created_late_explores_on_from_the_runs_progress():
    """A resumed run, or a rollout worker recreated after a fault, does not start its epsilon at 1 again: it starts
    from its share of the run's env steps so far (which the driver passes in its setup)."""
    import numpy as np

    from daskrl.config import Config
    from daskrl.driver.fleet.role_setups import rollout_setup
    from daskrl.envs import probe_env
    from daskrl.sampling.policies.exploration import EpsilonGreedyActing

    config = Config.from_flat({"env": "CartPole-v1", "algo": "dqn", "num_workers": 2, "exploration_fraction": 0.5,
                               "train_for_env_steps": 4000})
    spaces = probe_env("CartPole-v1")
    fresh, late = (rollout_setup(config, spaces, [], 0, done).policy.exploration for done in (0, 1200))
    assert (fresh.start_steps, late.start_steps) == (0, 600)  # each of 2 workers took half of the run's 1,200

    def greedy(obs, state=None, deterministic=False):
        return np.zeros(len(obs), np.int64), np.zeros(len(obs), np.float32), None

    act = EpsilonGreedyActing(greedy, late, seed=0)
    explored = 1 - (np.concatenate([act(np.zeros((100, 4)))[0] for _ in range(4)]) == 0).mean()
    # epsilon falls from about 0.46 (600 of this worker's 1,000 decay steps taken) to its final value by step 1,000,
    # so about a quarter of its actions are random (half of those pick the greedy action anyway)
    assert explored == pytest.approx(0.5 * np.mean([late.epsilon(600 + s) for s in range(400)]), abs=0.04)
    assert late.epsilon(late.start_steps) < 0.5


def test_epsilon_greedy_acting_takes_the_greedy_action_or_a_uniform_one():
    import numpy as np

    from daskrl.sampling.policies.exploration import EpsilonGreedyActing, exploring
    from daskrl.setups import EpsilonGreedy

    def greedy(obs, state=None, deterministic=False):  # as SamplingPolicy's act
        assert deterministic  # epsilon-greedy wraps the greedy action, never a sampled one
        return np.full(len(obs), 2), np.zeros(len(obs), np.float32), np.zeros(len(obs), np.float32)

    assert exploring(greedy, None, 0) is greedy  # APPO: the policy's own act, unwrapped
    act = EpsilonGreedyActing(greedy, EpsilonGreedy(0.3, 0, 4, 0), seed=0)
    actions = np.concatenate([act(np.zeros((1000, 1)))[0] for _ in range(20)])
    share_random = 1 - (actions == 2).mean()  # a random action is 2 one time in 4
    assert share_random == pytest.approx(0.3 * 3 / 4, abs=0.01)
    assert set(np.unique(actions)) == {0, 1, 2, 3} and act.steps == 20_000


def test_dqn_refuses_what_it_cannot_do_in_one_line_each():
    from daskrl.config import Config
    from daskrl.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        Config.from_flat({"algo": "dqn", "inference": "remote", "num_policies": 2, "rnn": "lstm",
                          "learning_starts": 10, "replay_capacity": 5, "lr_schedule": "kl_adaptive"}).validate()
    text = str(err.value)
    assert "--inference inline" in text and "--num-policies" in text and "--rnn" in text and "--lr-schedule" in text
    assert "--learning-starts 10 exceeds --replay-capacity 5" in text
    Config.from_flat({"algo": "dqn"}).validate()  # the defaults fit


def test_dqn_refuses_continuous_actions_before_anything_starts(tmp_path):
    from daskrl.driver.launch.preflight import preflight
    from daskrl.errors import ConfigError

    with pytest.raises(ConfigError, match="--algo dqn needs discrete actions, and this env's are box"):
        preflight(run_config(tmp_path, algo="dqn", env="Pendulum-v1"))


@pytest.fixture
def one_torch_thread():
    """Train on one torch thread, as the learner component does (--learner-threads 1): on a busy 2-core machine two
    intra-op threads made these small updates 10-20x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_dqn_trainer_learns_from_dict_observations_with_an_action_mask(one_torch_thread):
    """The cue env: Dict observations (a Discrete cue and a clock; its 3x3 image is left out, the CNN has its own
    test below), two of three actions allowed, reward 1 for the cue's action. Trained on replayed steps with
    normalization on, the greedy (mode) action is the cue's."""
    import numpy as np

    from daskrl.algo.dqn.trainer import DQNTrainer
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.envs import probe_env
    from daskrl.envs.layouts.dict_obs import pack_into, unpack
    from daskrl.models.actor_critic import build_model
    from daskrl.testing.environments.single_agent_envs import CueEnv

    spaces = probe_env("daskrl.testing.environments.envs:cue", {"masked": True}, obs_keys=["cue", "clock", "action_mask"])
    env, rng = CueEnv(masked=True), np.random.default_rng(0)
    rows, actions, rewards, next_rows = [], [], [], []
    obs, _ = env.reset(seed=0)
    for _ in range(600):
        row = pack_into(np.zeros(spaces.obs_shape, np.uint8), obs, spaces.obs_keys)
        action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
        obs, reward, _, truncated, _ = env.step(action)
        if truncated:
            obs, _ = env.reset()
        rows.append(row)
        actions.append(action)
        rewards.append(reward)
        next_rows.append(pack_into(np.zeros(spaces.obs_shape, np.uint8), obs, spaces.obs_keys))
    data = {"obs": np.stack(rows), "actions": np.array(actions), "rewards": np.array(rewards, np.float32),
            "next_obs": np.stack(next_rows), "discounts": np.full(600, 0.5, np.float32)}
    trainer = DQNTrainer(build_model(spaces, ModelConfig(hidden_sizes=[32, 32]), 0),
                         LearnerConfig(learning_rate=3e-3), AlgoConfig(target_update_interval=20))
    for _ in range(200):
        pick = rng.integers(0, 600, 64)
        metrics, td = trainer.train({k: v[pick] for k, v in data.items()}, np.ones(64, np.float32))
        assert metrics["updates"] == 1 and td.shape == (64,) and np.isfinite(td).all()
    greedy = trainer.model.act(data["obs"], deterministic=True)[0]
    fields = unpack(data["obs"], spaces.obs_keys)
    assert (fields["action_mask"][np.arange(600), greedy] > 0.5).all()  # never a forbidden action
    assert (greedy == fields["cue"].reshape(-1)).mean() > 0.9


def test_dqn_trainer_runs_the_nature_cnn_on_atari_sized_frames(one_torch_thread):
    import gymnasium as gym
    import numpy as np

    from daskrl.algo.dqn.trainer import DQNTrainer, q_values
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.envs.layouts.spaces import EnvSpaces
    from daskrl.models.actor_critic import build_model

    spaces = EnvSpaces.from_spaces(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), gym.spaces.Discrete(6))
    model = build_model(spaces, ModelConfig(), 0)
    assert model.encoder_name == "cnn" and model.shared_encoder  # one Nature CNN trunk for both dueling streams
    trainer = DQNTrainer(model, LearnerConfig(), AlgoConfig())
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (4, 84, 84, 4), dtype=np.uint8)
    batch = {"obs": frames, "actions": np.array([0, 1, 2, 5]), "rewards": np.ones(4, np.float32),
             "next_obs": frames[::-1].copy(), "discounts": np.full(4, 0.99, np.float32)}
    before = q_values(trainer.model, torch.from_numpy(frames), True)[0].detach().clone()
    metrics, td = trainer.train(batch, np.ones(4, np.float32))
    assert metrics["updates"] == 1 and before.shape == (4, 6)
    assert not torch.equal(before, q_values(trainer.model, torch.from_numpy(frames), True)[0])


def test_the_q_network_is_the_actor_critic_read_as_dueling_streams():
    """Q's mean over actions is the value head's output, and its argmax is the action the samplers' greedy act and
    enjoy take, for separate encoders (vector observations) as for a shared one."""
    import numpy as np

    from daskrl.algo.dqn.trainer import q_values
    from daskrl.config import ModelConfig
    from daskrl.envs import probe_env
    from daskrl.models.actor_critic import ActorCritic

    spaces = probe_env("CartPole-v1")
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    for shared in (False, True):
        model = ActorCritic(spaces, ModelConfig(), shared_encoder=shared)
        torch.nn.init.normal_(model.actor.logits.weight, std=1.0)  # advantages that differ between actions
        q, mask = q_values(model, torch.from_numpy(obs), True)
        assert mask is None
        assert torch.allclose(q.mean(-1), model(torch.from_numpy(obs))[1], atol=1e-6)
        assert np.array_equal(q.argmax(-1).numpy(), model.act(obs, deterministic=True)[0])


def test_dqn_has_defaults_of_its_own_where_none_is_given(tmp_path):
    from daskrl.config.algo_options import describe_algo_defaults
    from daskrl.driver.launch.preflight import preflight

    config = run_config(tmp_path, algo="dqn", batch_size=32)
    assert describe_algo_defaults(config) == ("defaults for --algo dqn: --num-envs-per-worker 8 --rollout 16 "
                                              "--hidden-sizes 256 256 --replay-ratio 0.5 --target-update-interval "
                                              "250 --exploration-fraction 0.2 --lr-schedule linear --activation "
                                              "relu --max-grad-norm 10.0 --no-normalize-obs --value-encoder shared "
                                              "(options you give win)")
    preflight(config)
    assert (config.learner.batch_size, config.model.activation, config.learner.max_grad_norm) == (32, "relu", 10.0)
    assert (config.model.hidden_sizes, config.algo.replay_ratio, config.algo.target_update_interval) == (
        [256, 256], 0.5, 250)
    assert (config.sampler.num_envs_per_worker, config.sampler.rollout) == (8, 16)
    assert not config.model.normalize_obs
    assert _built(config).shared_encoder  # the dueling streams read one trunk
    given = run_config(tmp_path, algo="dqn", normalize_obs=True, value_encoder="separate")  # asked for: they win
    preflight(given)
    assert given.model.normalize_obs and "normalize" not in describe_algo_defaults(given)
    assert not _built(given).shared_encoder
    appo = run_config(tmp_path)
    preflight(appo)
    assert (appo.learner.batch_size, appo.model.activation) == (512, "tanh") and not describe_algo_defaults(appo)
    assert not _built(appo).shared_encoder  # APPO's MLPs stay apart (CleanRL's)


def _built(config):
    """The network a run of ``config`` builds (learner, samplers and enjoy build the same one)."""
    from daskrl.envs import probe_env
    from daskrl.models.actor_critic import build_model

    return build_model(probe_env(config.env.env), config.model, config.run.seed)


def test_several_minibatches_in_one_call_train_exactly_as_one_call_each(one_torch_thread):
    """The learner trains a request's K minibatches in one call: the same updates, bit for bit, as K calls of one
    (normalized observations, target copies within the K, a non-finite minibatch skipped and its TD errors zero)."""
    import numpy as np

    from daskrl.algo.dqn.trainer import DQNTrainer
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.envs import probe_env
    from daskrl.models.actor_critic import build_model

    spaces, rng, K, B = probe_env("CartPole-v1"), np.random.default_rng(0), 6, 16
    batches = {"obs": rng.normal(size=(K, B, 4)).astype(np.float32), "actions": rng.integers(0, 2, (K, B)),
               "rewards": rng.normal(size=(K, B)).astype(np.float32),
               "next_obs": rng.normal(size=(K, B, 4)).astype(np.float32), "discounts": np.full((K, B), 0.99, np.float32)}
    batches["rewards"][2, 3] = np.nan
    weights = rng.uniform(0.1, 1.0, (K, B)).astype(np.float32)

    def trainer() -> DQNTrainer:
        model = build_model(spaces, ModelConfig(hidden_sizes=[32, 32], normalize_obs=True), 0)
        return DQNTrainer(model, LearnerConfig(learning_rate=1e-3, max_grad_norm=10.0), AlgoConfig(target_update_interval=3))

    one, many = trainer(), trainer()
    singles = [one.train({k: v[i] for k, v in batches.items()}, weights[i]) for i in range(K)]
    metrics, td, applied = many.train_many(batches, weights)
    assert applied.tolist() == [True, True, False, True, True, True] and metrics["updates"] == 5
    assert metrics["skipped_updates"] == 1 and many.train_steps == one.train_steps == 5
    assert np.array_equal(td, np.stack([t for _, t in singles])) and not td[2].any()
    assert metrics["loss"] == pytest.approx(np.mean([m["loss"] for m, _ in singles if m["updates"]]), rel=1e-6)
    for net in ("model", "target"):
        for (name, a), b in zip(getattr(one, net).state_dict().items(), getattr(many, net).state_dict().values(),
                                strict=True):
            assert torch.equal(a, b), (net, name)


def test_a_linear_learning_rate_schedule_decays_the_replay_updates_with_the_budget(one_torch_thread):
    """--lr-schedule linear with an off-policy algorithm: each request's updates train at the rate the budget's
    progress leaves (the same floor as APPO's), and a constant schedule keeps the rate (SB3 takes a schedule for
    DQN's and SAC's rate too)."""
    import numpy as np

    from daskrl.algo.common.lr_schedule import LINEAR_FLOOR
    from daskrl.algo.dqn.trainer import DQNTrainer
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.envs import probe_env
    from daskrl.models.actor_critic import build_model

    rng, K, B = np.random.default_rng(0), 2, 8
    batches = {"obs": rng.normal(size=(K, B, 4)).astype(np.float32), "actions": rng.integers(0, 2, (K, B)),
               "rewards": rng.normal(size=(K, B)).astype(np.float32),
               "next_obs": rng.normal(size=(K, B, 4)).astype(np.float32), "discounts": np.full((K, B), 0.99, np.float32)}
    weights = np.ones((K, B), np.float32)
    for schedule, at, expected in (("linear", 25_000, 1e-3 * 0.5), ("linear", 100_000, 1e-3 * LINEAR_FLOOR),
                                   ("constant", 25_000, 1e-3)):
        model = build_model(probe_env("CartPole-v1"), ModelConfig(hidden_sizes=[16]), 0)
        trainer = DQNTrainer(model, LearnerConfig(learning_rate=1e-3, lr_schedule=schedule), AlgoConfig())
        metrics, _, _ = trainer.train_many(batches, weights, env_steps=at, total_env_steps=50_000)
        assert metrics["lr"] == pytest.approx(expected), schedule
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(expected)
        assert trainer.hp["learning_rate"] == 1e-3, "the schedule changed the policy's own rate, not the step's"


def test_dqn_by_default_tells_mountaincars_flag_from_the_hill_after_random_play(tmp_path, one_torch_thread):
    """Why DQN does not normalize observations by default (issue 35, MountainCar). Its learner's running statistics
    count every replayed draw, so after the random steps of the exploration phase they are random play's (position
    -0.52 +- 0.08), and the +-5 std clip made every position beyond x = -0.1, the flag's at 0.5 included, one and
    the same input: the first successes could not be told from the hill below.
    Trained as the learner trains (minibatches of real random-play transitions), the default Q-network still sees
    the flag, the hill and the fastest speeds apart."""
    import gymnasium as gym
    import numpy as np

    from daskrl.algo.dqn.trainer import DQNTrainer
    from daskrl.driver.launch.preflight import preflight
    from daskrl.envs import probe_env
    from daskrl.models.actor_critic import build_model

    config = run_config(tmp_path, env="MountainCar-v0", algo="dqn", hidden_sizes=[32, 32])
    preflight(config)
    env, rng = gym.make("MountainCar-v0"), np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    rows, actions, next_rows = [], [], []
    for _ in range(3_000):  # random play, as while epsilon is near 1
        action = int(rng.integers(3))
        nxt, _, terminated, truncated, _ = env.step(action)
        rows.append(obs), actions.append(action), next_rows.append(nxt)
        obs = env.reset()[0] if terminated or truncated else nxt
    data = {"obs": np.array(rows, np.float32), "actions": np.array(actions), "rewards": -np.ones(3_000, np.float32),
            "next_obs": np.array(next_rows, np.float32), "discounts": np.full(3_000, 0.98, np.float32)}
    model = build_model(probe_env("MountainCar-v0"), config.model, 0)
    trainer = DQNTrainer(model, config.learner, config.algo)
    for _ in range(100):
        pick = rng.integers(0, 3_000, 64)
        assert trainer.train({k: v[pick] for k, v in data.items()}, np.ones(64, np.float32))[0]["updates"] == 1
    assert data["obs"][:, 0].max() < 0.0  # random play never climbed the right hill
    seen = model.prepare(torch.tensor([[0.5, 0.02], [0.2, 0.02], [-0.5, 0.07], [-0.5, 0.05]]))[0]
    assert not torch.equal(seen[0], seen[1]), seen  # the flag and the hill below it
    assert not torch.equal(seen[2], seen[3]), seen  # top speed and a lower one


def test_weights_of_another_network_are_refused_as_appos_are():
    """A warm start (``--init-checkpoint``) or a restart from published weights loads the model's weights alone:
    weights of a network with its own value tower (DQN's default before one trunk) are refused in one line, not
    loaded in part with the tower dropped."""
    from daskrl.algo.dqn.trainer import DQNTrainer
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.envs import probe_env
    from daskrl.models.actor_critic import build_model

    spaces = probe_env("CartPole-v1")
    old = build_model(spaces, ModelConfig(value_encoder="separate"), 0).state_dict()
    trainer = DQNTrainer(build_model(spaces, ModelConfig(value_encoder="shared"), 0), LearnerConfig(), AlgoConfig())
    with pytest.raises(ValueError, match="do not fit this run's network .*value_encoder"):
        trainer.load_weights(old)
    same = build_model(spaces, ModelConfig(value_encoder="shared"), 1).state_dict()
    trainer.load_weights(same)
    assert all(torch.equal(a, b) for a, b in zip(trainer.target.state_dict().values(), same.values(), strict=True))
