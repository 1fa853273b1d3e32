"""The learner's faster kernels (--learner-kernels auto) compute what plain torch does: the sigmoid tanh
(daskrl/models/inputs/activations.py) against torch.tanh, values and gradients, and a training step with it against
one with nn.Tanh; the fused and unwrapped Adam steps of daskrl/algo/kernels/eager_optim.py against torch's, and the
torch internals they read; clip_grad_norm, the backward recursion and a batch evaluated in pieces; a bfloat16 encoder
and the first convolution on uint8 frames; APPO, DQN and SAC trained alike with off and auto, and a resume that keeps
the loading run's kernels. Exported graphs keep the standard tanh op."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.algo.common.optimizers import make_optimizer
from daskrl.algo.common.policy_trainer import learner_kernels
from daskrl.config import Config
from daskrl.envs import EnvSpaces
from daskrl.models.actor_critic import build_model
from daskrl.models.inputs import activations
from daskrl.models.inputs.activations import Tanh, sigmoid_tanh

#: --learner-kernels auto: the fast paths these tests hold to plain torch
FAST = learner_kernels("auto")


@pytest.fixture
def through_sigmoid(monkeypatch):
    """Tanh computes through sigmoid whichever kernel this machine's CPU runs faster."""
    monkeypatch.setattr(activations, "sigmoid_is_faster", lambda: True)


def test_tanh_takes_the_kernel_timed_faster_on_this_cpu(monkeypatch):
    x = torch.randn(256, 64)
    assert isinstance(activations.sigmoid_is_faster(), bool)
    monkeypatch.setattr(activations, "sigmoid_is_faster", lambda: False)
    assert torch.equal(Tanh()(x), torch.tanh(x))
    monkeypatch.setattr(activations, "sigmoid_is_faster", lambda: True)
    assert torch.equal(Tanh()(x), sigmoid_tanh(x)) and not torch.equal(sigmoid_tanh(x), torch.tanh(x))


def test_the_sigmoid_tanh_and_its_gradient_equal_torch_tanh_to_float_rounding(through_sigmoid):
    x = torch.cat([torch.linspace(-20, 20, 4001), torch.randn(10_000) * 3, torch.tensor([0.0, 1e-8, -1e-8])])
    ours = x.clone().requires_grad_(True)
    theirs = x.clone().requires_grad_(True)
    y_ours, y_theirs = Tanh()(ours), torch.tanh(theirs)
    assert (y_ours - y_theirs).abs().max() < 3e-7
    assert y_ours.abs().max() <= 1.0
    weights = torch.randn_like(x)
    (y_ours * weights).sum().backward()
    (y_theirs * weights).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad, atol=2e-6, rtol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(Tanh()(x), sigmoid_tanh(x))


def _cartpole_batch(seed: int, T: int = 16, N: int = 64) -> TrajectoryBatch:
    rng = np.random.default_rng(seed)
    return TrajectoryBatch(obs=rng.normal(size=(T + 1, N, 4)).astype(np.float32),
                           actions=rng.integers(0, 2, (T, N)), rewards=rng.normal(size=(T, N)).astype(np.float32),
                           dones=rng.random((T, N)) < 0.05, log_probs=np.full((T, N), -np.log(2), np.float32),
                           policy_version=np.zeros((T, N), np.int64))


def _spaces() -> EnvSpaces:
    return EnvSpaces.from_spaces(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


def _with_torch_tanh(model: nn.Module) -> nn.Module:
    """The same model with every sigmoid tanh replaced by nn.Tanh (the standard kernel)."""
    model = copy.deepcopy(model)
    for module in model.modules():
        for name, child in module.named_children():
            if isinstance(child, Tanh):
                setattr(module, name, nn.Tanh())
    return model


def test_a_training_step_with_the_sigmoid_tanh_trains_as_with_torch_tanh(through_sigmoid):
    """The same weights, batch and minibatch order: the two steps' losses and updated weights agree to float
    rounding (a real difference in the kernel's values or gradients would move them by far more)."""
    cfg = Config().replace(batch_size=256, num_epochs=2).learner
    fast = build_model(_spaces(), Config().model, seed=3)
    assert any(isinstance(m, Tanh) for m in fast.modules()), "the MLP encoders are built with the fast tanh"
    standard = _with_torch_tanh(fast)
    results = []
    for model in (fast, standard):
        torch.manual_seed(0)  # the same minibatch order
        trainer = APPOTrainer(model, cfg, 0)
        metrics = trainer.train(_cartpole_batch(1), 0)
        results.append((metrics, {k: v.clone() for k, v in model.state_dict().items()}))
    (m_fast, w_fast), (m_std, w_std) = results
    assert m_fast["updates"] == m_std["updates"] == 8
    for key in ("loss", "policy_loss", "value_loss", "entropy", "grad_norm"):
        assert m_fast[key] == pytest.approx(m_std[key], rel=1e-4, abs=1e-6), key
    for name in w_std:
        torch.testing.assert_close(w_fast[name], w_std[name], atol=1e-5, rtol=1e-4, msg=name)
    moved = max((w_fast[n] - p).abs().max().item() for n, p in build_model(_spaces(), Config().model, seed=3)
                .state_dict().items() if p.is_floating_point())
    assert moved > 1e-3, "the step changed nothing: the comparison above would hold for any kernel"


def test_the_fused_adam_step_is_the_foreach_step():
    cfg = Config().learner
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(64, 4)), nn.Parameter(torch.randn(64))]
    twins = [nn.Parameter(p.detach().clone()) for p in params]
    fused = make_optimizer(params, cfg, 1e-3, FAST)
    foreach = torch.optim.Adam(twins, lr=1e-3, eps=1e-5, foreach=True)
    assert fused.defaults["fused"] is True
    for _ in range(5):
        grads = [torch.randn_like(p) for p in params]
        for group, opt in ((params, fused), (twins, foreach)):
            for p, g in zip(group, grads, strict=True):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(params, twins, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    assert sorted(fused.state_dict()["state"][0]) == sorted(foreach.state_dict()["state"][0])


def test_traced_graphs_keep_the_standard_tanh_op():
    model = build_model(_spaces(), Config().model, seed=0)
    traced = torch.jit.trace(model.encoder, torch.randn(3, 4), check_trace=False)
    ops = {node.kind() for node in traced.inlined_graph.nodes()}
    assert "aten::tanh" in ops and "aten::sigmoid" not in ops, ops


def _atari_spaces() -> EnvSpaces:
    return EnvSpaces.from_spaces(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), gym.spaces.Discrete(6))


def _loss_and_grads(model: nn.Module, obs: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor
                    ) -> tuple[float, dict[str, torch.Tensor]]:
    """A PPO-shaped loss (log-probs weighted by fixed advantages, a value error, the entropy) and its gradients."""
    model.zero_grad(set_to_none=True)
    log_probs, entropy, values = model.evaluate(obs, actions)
    assert log_probs.dtype == values.dtype == torch.float32  # the heads compute in float32 either way
    loss = -(log_probs * targets).mean() + 0.5 * ((values - targets) ** 2).mean() - 0.01 * entropy.mean()
    loss.backward()
    return loss.item(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_a_bfloat16_encoder_gives_the_float32_loss_and_gradients_within_bounds():
    """The Nature CNN on a fixed batch of frames: the loss within 1%, every gradient pointing the same way (cosine
    above 0.99) with a norm within 5%, the weights and their gradients float32; and bfloat16 really ran (the
    gradients are not bit-identical)."""
    torch.manual_seed(0)
    fp32 = build_model(_atari_spaces(), Config().model, seed=1)
    bf16 = copy.deepcopy(fp32)
    bf16.train_encoders_in_bfloat16()
    obs = torch.randint(0, 256, (64, 84, 84, 4), dtype=torch.uint8)
    actions, targets = torch.randint(0, 6, (64,)), torch.randn(64)
    loss32, grads32 = _loss_and_grads(fp32, obs, actions, targets)
    loss16, grads16 = _loss_and_grads(bf16, obs, actions, targets)
    assert loss16 == pytest.approx(loss32, rel=1e-2)
    assert all(p.dtype == torch.float32 for p in bf16.parameters())
    assert sorted(grads16) == sorted(grads32)
    identical = 0
    for name, g32 in grads32.items():
        g16 = grads16[name]
        assert g16.dtype == torch.float32, name
        cosine = torch.nn.functional.cosine_similarity(g16.flatten(), g32.flatten(), dim=0).item()
        assert cosine > 0.99, (name, cosine)
        assert g16.norm().item() == pytest.approx(g32.norm().item(), rel=0.05), name
        identical += bool(torch.equal(g16, g32))
    assert identical < len(grads32) // 2, "the encoder's gradients are float32's bit for bit: no bfloat16 ran"


def test_auto_learner_precision_is_bfloat16_for_image_encoders_on_native_bfloat16_cpus_only(monkeypatch):
    import daskrl.algo.common.policy_trainer as policy_trainer

    cnn, mlp = build_model(_atari_spaces(), Config().model, seed=0), build_model(_spaces(), Config().model, seed=0)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    for native in (True, False):
        monkeypatch.setattr(policy_trainer, "cpu_has_native_bfloat16", lambda native=native: native)
        assert policy_trainer.learner_precision("auto", cnn, cpu) == ("bfloat16" if native else "float32")
        assert policy_trainer.learner_precision("auto", mlp, cpu) == "float32"
        assert policy_trainer.learner_precision("auto", cnn, gpu) == "float32"
        assert policy_trainer.learner_precision("bfloat16", mlp, cpu) == "bfloat16"
    with pytest.raises(ValueError, match="learner precision must be one of auto, float32, bfloat16"):
        policy_trainer.learner_precision("fp16", cnn, cpu)
    trainer = APPOTrainer(cnn, Config().replace(learner_precision="bfloat16").learner, 0)
    assert trainer.precision == "bfloat16" and cnn.encoder_autocast == torch.bfloat16


@pytest.mark.parametrize("written_out", [False, True])
def test_the_no_gradient_pass_in_pieces_gives_the_whole_batch_pass(written_out):
    """FlatBatch evaluates a batch larger than EVAL_ROWS (and not a multiple of it) piece by piece, through the model
    or through its written-out forward pass (an MLP's, daskrl/algo/kernels/mlp_gradients.py): the target log-probs and values
    are those of one pass of the model over every row, in the batch's order, and the observations the written-out
    pass prepared are the model's own."""
    from daskrl.algo.appo.flat_batch import EVAL_ROWS, FlatBatch
    from daskrl.algo.kernels.flat_parameters import FlatParameters
    from daskrl.algo.kernels.mlp_gradients import MlpGradients

    model = build_model(_spaces(), Config().model, seed=2)
    T, N = 20, 131  # 2,620 steps: two whole pieces and a part
    assert T * N > 2 * EVAL_ROWS and T * N % EVAL_ROWS
    obs, actions = torch.randn(T + 1, N, 4) * 3 + 1, torch.randint(0, 2, (T * N,))
    model.set_obs_stats(np.full(4, 0.5), np.full(4, 2.0), 10.0)
    by_hand = MlpGradients(model, FlatParameters(model.parameters())) if written_out else None
    layout = FlatBatch(model, obs, actions, torch.zeros(T, N), torch.zeros(T, N, 0), T, by_hand=by_hand)
    with torch.no_grad():
        lp, _, values = model.evaluate(obs[:-1].reshape(T * N, 4), actions)
        prepared = model.prepare(obs[:-1].reshape(T * N, 4))[0]
    torch.testing.assert_close(layout.target_lp, lp.reshape(T, N))
    torch.testing.assert_close(layout.values, values.reshape(T, N))
    torch.testing.assert_close(layout.last_value, model.value(obs[-1]).detach())
    if written_out:
        torch.testing.assert_close(layout.prepared, prepared)
    else:
        assert layout.prepared is None  # autograd's minibatches prepare their own


def test_the_torch_internals_the_eager_optimizer_reads_are_where_it_expects_them():
    """daskrl/algo/kernels/eager_optim.py reads private torch code (the wrappers torch.optim puts around its methods,
    the step-hook registries, the fused Adam kernels) and falls back to torch's own step wherever it is not as
    expected: still correct, but slower and importing torch._dynamo, so nothing else would notice. A torch upgrade
    that moved any of it fails here, naming what moved (adapt eager_optim.py to the new torch; until then
    --learner-kernels off trains without it)."""
    from daskrl.algo.kernels import eager_optim

    torch_is = f"torch {torch.__version__}"
    assert eager_optim.skip_compiler_wrappers(), (
        f"{torch_is}: torch.optim.Optimizer's add_param_group, state_dict, load_state_dict and zero_grad are no longer "
        "wrapped by torch._disable_dynamo as eager_optim.skip_compiler_wrappers expects")
    for cls, base in ((eager_optim.EagerAdam, "Adam"), (eager_optim.EagerAdamW, "AdamW")):
        assert cls._plain is not None, f"{torch_is}: torch.optim.{base}.step is not wrapped as eager_optim expects"
    params, _ = _params_and_twins(0)
    optimizer = FAST.adam(params, lr=1e-3, eps=1e-5)
    assert not eager_optim._may_have_step_hooks(optimizer), (
        f"{torch_is}: the step-hook registries are not where eager_optim._may_have_step_hooks looks, so every step "
        "takes torch's wrapped one")
    for name in ("_fused_adam_", "_fused_adamw_", "_foreach_norm", "_foreach_mul_"):
        assert callable(getattr(torch, name, None)), f"{torch_is}: torch.{name} is gone (eager_optim or fast_paths call it)"
    for step in range(2):
        for p in params:
            p.grad = torch.randn_like(p)
        took = optimizer._fused_step()  # the first step makes the moments through torch's own step
        assert took == (step == 1), f"{torch_is}: the fused step no longer applies where it did ({step=}, {took=})"
        if not took:
            optimizer.step()


def test_the_switch_is_a_train_flag_auto_by_default():
    from daskrl.cli import _config_from_args, build_parser

    parser = build_parser()
    assert _config_from_args(parser.parse_args(["train"])).learner.learner_kernels == "auto"
    assert _config_from_args(parser.parse_args(["train", "--learner-kernels", "off"])).learner.learner_kernels == "off"
    help_text = " ".join(parser.commands["train"].format_help().split())  # the lines as argparse wraps them, joined
    assert "--learner-kernels {auto,off}" in help_text and "plain torch" in help_text
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--learner-kernels", "fast"])
    with pytest.raises(ValueError, match="learner kernels must be one of auto, off"):
        learner_kernels("fast")


def _algo_trainer(algo: str, kernels: str):
    """A small trainer of ``algo`` (APPO on CartPole's MLP, which auto writes out; DQN; SAC on Pendulum) with
    --learner-kernels ``kernels``, and a function that trains it one step on fixed data."""
    from daskrl.algo.dqn.trainer import DQNTrainer
    from daskrl.algo.sac.trainer import SACTrainer
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig

    rng = np.random.default_rng(0)
    if algo == "appo":
        cfg = Config().replace(batch_size=256, learner_kernels=kernels)
        trainer = APPOTrainer(build_model(_spaces(), cfg.model, seed=0), cfg.learner, 0)
        return trainer, lambda step: trainer.train(_cartpole_batch(step), 0)
    learner = LearnerConfig(learning_rate=1e-3, learner_kernels=kernels)
    if algo == "dqn":
        model = build_model(_spaces(), ModelConfig(hidden_sizes=[32, 32]), 0)
        trainer = DQNTrainer(model, learner, AlgoConfig(target_update_interval=2))
        dims, actions = 4, rng.integers(0, 2, (5, 16))
    else:
        pendulum = EnvSpaces.from_spaces(gym.spaces.Box(-8, 8, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
        model_cfg = ModelConfig(hidden_sizes=[32, 32], action_bounds="squash", gaussian_std="state")
        trainer = SACTrainer(build_model(pendulum, model_cfg, 0), model_cfg, learner, AlgoConfig(algo="sac", n_step=1))
        dims, actions = 3, rng.uniform(-2, 2, (5, 16, 1)).astype(np.float32)
    data = {"obs": rng.normal(size=(5, 16, dims)).astype(np.float32), "actions": actions,
            "rewards": rng.normal(size=(5, 16)).astype(np.float32),
            "next_obs": rng.normal(size=(5, 16, dims)).astype(np.float32), "discounts": np.full((5, 16), 0.99, np.float32)}
    return trainer, lambda step: trainer.train({k: v[step] for k, v in data.items()}, np.ones(16, np.float32))


@pytest.mark.parametrize("algo", ["appo", "dqn", "sac"])
def test_off_trains_in_plain_torch_and_auto_trains_alike(algo):
    """--learner-kernels off: every optimizer is torch.optim's own Adam, stepped by torch, every gradient autograd's
    (no written-out gradients, no flat buffer). auto: the fast paths, whose steps move the weights as off's do, to
    float rounding."""
    from daskrl.algo.common.plain_torch import PlainTorch

    trainers = {}
    activations.sigmoid_is_faster()  # timed once, drawing random numbers: before the seeds below
    for kernels in ("off", "auto"):
        torch.manual_seed(0)
        trainer, train_step = _algo_trainer(algo, kernels)
        for step in range(3):
            torch.manual_seed(step)  # the same minibatch order, the same sampled actions
            train_step(step)
        trainers[kernels] = trainer
    off, auto = trainers["off"], trainers["auto"]
    optimizers = off.optimizers() if algo != "appo" else [off.optimizer]
    assert type(off.kernels) is PlainTorch and off.kernels.name == "off" and auto.kernels.name == "auto"
    assert all(type(o) is torch.optim.Adam for o in optimizers), [type(o) for o in optimizers]
    assert all(type(o) is not torch.optim.Adam for o in (auto.optimizers() if algo != "appo" else [auto.optimizer]))
    if algo == "appo":
        assert off.by_hand is None and off.flat is None
        assert auto.by_hand is not None and auto.flat is not None  # CartPole's MLP: written out under auto
    start = _algo_trainer(algo, "off")[0].model.state_dict()
    moved = 0.0
    for (name, a), b in zip(off.model.state_dict().items(), auto.model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
        if a.is_floating_point():
            moved = max(moved, (a - start[name]).abs().max().item())
    assert moved > 1e-3, "the steps changed nothing: the comparison would hold for any path"


def test_a_resume_keeps_this_runs_kernels_and_the_saved_moments():
    """An optimizer's state dict carries how the run that saved it computed (``fused`` under auto), and torch's
    load_state_dict would take that with the moments: a run resumed with --learner-kernels off would step with the
    fused kernel. The moments load; the implementation stays the loading run's, both ways."""
    cfg = Config().replace(batch_size=256)

    def trainer(kernels: str) -> APPOTrainer:
        return APPOTrainer(build_model(_spaces(), cfg.model, seed=0), cfg.replace(learner_kernels=kernels).learner, 0)

    auto = trainer("auto")
    auto.train(_cartpole_batch(0), 0)
    saved = copy.deepcopy(auto.state_dict())
    assert saved["optimizer"]["param_groups"][0]["fused"] is True
    steps = [state["step"] for state in saved["optimizer"]["state"].values()]
    assert len({id(step) for step in steps}) == 1  # the flat moments' one step count, shared as torch.save keeps it
    off = trainer("off")
    off.load_state_dict(copy.deepcopy(saved))
    assert off.optimizer.param_groups[0]["fused"] is None and off.optimizer.param_groups[0]["foreach"] is None
    for key, state in saved["optimizer"]["state"].items():
        assert torch.equal(off.optimizer.state_dict()["state"][key]["exp_avg"], state["exp_avg"]), key
    off.train(_cartpole_batch(1), 0)
    assert {float(state["step"]) for state in off.optimizer.state_dict()["state"].values()} == {8.0}  # each its own
    again = trainer("auto")
    again.load_state_dict(copy.deepcopy(off.state_dict()))
    assert again.optimizer.param_groups[0]["fused"] is True
    again.train(_cartpole_batch(2), 0)
    assert again.optimizer._flat_moments is not None  # the fused step over the flat buffer, as before the resume
    assert float(again.optimizer.state_dict()["state"][0]["step"]) == 12  # four minibatches a step, three steps


@pytest.mark.parametrize("kernels", ["auto", "off"])
def test_a_trainer_started_afresh_trains_as_a_new_one_and_keeps_its_counters(kernels):
    """A league exploiter's reset (PolicyTrainer.start_afresh): after training, a trainer started afresh from a new
    one's state takes the same next step as that new one, to the bit (weights, Adam's moments and the flat buffer's
    all fresh), while its counters and hyperparameters go on."""
    cfg = Config().replace(batch_size=256, learner_kernels=kernels)

    def trainer() -> APPOTrainer:
        return APPOTrainer(build_model(_spaces(), cfg.model, seed=0), cfg.learner, 0)

    trained = trainer()
    for k in range(3):
        trained.train(_cartpole_batch(k), 0)
    trained.set_hyperparams({"entropy_coef": 0.05})
    trained.start_afresh(trainer())
    assert (trained.train_steps, trained.samples_trained) == (3, 3 * 16 * 64)
    assert trained.hp["entropy_coef"] == 0.05
    new = trainer()
    new.set_hyperparams({"entropy_coef": 0.05})
    for t in (trained, new):
        torch.manual_seed(0)  # the same minibatch order
        t.train(_cartpole_batch(9), 0)
    for name, weight in new.model.state_dict().items():
        assert torch.equal(trained.model.state_dict()[name], weight), name
    fresh_moments = {k: v["exp_avg"] for k, v in new.optimizer.state_dict()["state"].items()}
    for key, state in trained.optimizer.state_dict()["state"].items():
        assert torch.equal(state["exp_avg"], fresh_moments[key]), key


def _params_and_twins(seed: int) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    torch.manual_seed(seed)
    params = [nn.Parameter(torch.randn(64, 4)), nn.Parameter(torch.randn(64)), nn.Parameter(torch.randn(2, 64))]
    return params, [nn.Parameter(p.detach().clone()) for p in params]


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_the_fused_step_without_torchs_python_is_torchs_fused_step_to_the_bit(optimizer):
    """daskrl's Adam(W) calls the fused kernel itself once the moments exist (eager_optim._EagerStep._fused_step):
    weights and state equal torch's own fused step bit for bit, through a state reload; a step where a parameter
    has no gradient leaves that parameter alone, as torch does."""
    cfg = Config().replace(optimizer=optimizer, weight_decay=0.01).learner
    params, twins = _params_and_twins(0)
    ours = make_optimizer(params, cfg, 1e-3, FAST)
    theirs = (torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW)(
        twins, lr=1e-3, eps=1e-5, fused=True, **({"weight_decay": 0.01} if optimizer == "adamw" else {}))
    took = []
    original = ours._fused_step
    ours._fused_step = lambda: took.append(original()) or took[-1]
    for step in range(6):
        grads = [torch.randn_like(p) for p in params]
        if step == 3:
            grads[1] = None  # no gradient for the bias this step
        for group, opt in ((params, ours), (twins, theirs)):
            for p, g in zip(group, grads, strict=True):
                p.grad = None if g is None else g.clone()
            opt.step()
        if step == 4:
            ours.load_state_dict(ours.state_dict())  # new moment tensors: the kept lists must follow them
    assert took == [False, True, True, False, True, True]
    for a, b in zip(params, twins, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(ours.state_dict()["state"].values(), theirs.state_dict()["state"].values(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    ours.zero_grad()
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("hook", [None, "optimizer", "global"])
def test_the_unwrapped_step_is_the_step_and_a_registered_hook_still_runs(hook):
    """eager_optim.step_unwrapped skips torch's wrapper around ``step`` (a profiler scope, the hooks): the same update
    to the bit; with a step hook registered, on the optimizer or for every optimizer, the wrapped step runs it."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from daskrl.algo.kernels.eager_optim import step_unwrapped

    cfg = Config().learner
    params, twins = _params_and_twins(1)
    ours, theirs = make_optimizer(params, cfg, 1e-3, FAST), make_optimizer(twins, cfg, 1e-3, FAST)
    calls = []
    handle = None
    if hook == "optimizer":
        handle = ours.register_step_pre_hook(lambda *args: calls.append(1))
    elif hook == "global":
        handle = register_optimizer_step_pre_hook(lambda opt, *args: calls.append(1) if opt is ours else None)
    try:
        for _ in range(4):
            grads = [torch.randn_like(p) for p in params]
            for group, step in ((params, lambda: step_unwrapped(ours)), (twins, theirs.step)):
                for p, g in zip(group, grads, strict=True):
                    p.grad = g.clone()
                step()
    finally:
        if handle is not None:
            handle.remove()
    assert calls == ([] if hook is None else [1, 1, 1, 1])
    for a, b in zip(params, twins, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("max_norm", [0.5, 1e6, math.inf])
def test_clip_grad_norm_is_torchs_to_the_bit(max_norm):
    from daskrl.algo.kernels.fast_paths import clip_grad_norm

    params, twins = _params_and_twins(1)
    for p, q in zip(params, twins, strict=True):
        p.grad = torch.randn_like(p) * 3
        q.grad = p.grad.clone()
    ours, theirs = clip_grad_norm(params, max_norm), torch.nn.utils.clip_grad_norm_(twins, max_norm)
    assert torch.equal(ours, theirs) and ours.item() > 0.5
    for p, q in zip(params, twins, strict=True):
        assert torch.equal(p.grad, q.grad)
    if max_norm == 0.5:
        assert torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in params])).item() == \
            pytest.approx(0.5, rel=1e-4)


def test_the_backward_recursion_in_numpy_is_the_torch_loop_to_the_bit():
    from daskrl.algo.appo.advantages import discounted_sums

    torch.manual_seed(2)
    for dtype in (torch.float32, torch.float64):
        deltas, coefficients = torch.randn(32, 128, dtype=dtype), torch.rand(32, 128, dtype=dtype) * 0.99
        expected, acc = torch.empty_like(deltas), torch.zeros(128, dtype=dtype)
        for t in range(31, -1, -1):
            acc = deltas[t] + coefficients[t] * acc
            expected[t] = acc
        assert torch.equal(discounted_sums(deltas, coefficients), expected), dtype


def test_the_loss_without_a_mask_is_the_loss_with_an_all_true_mask():
    from daskrl.algo.appo.loss import appo_loss

    torch.manual_seed(3)
    inputs = {k: torch.randn(256) for k in ("new_log_probs", "advantages", "values", "old_values", "value_targets",
                                            "entropy")}
    inputs["old_log_probs"] = inputs["new_log_probs"] + 0.1 * torch.randn(256)
    options = {"clip_ratio": 0.1, "value_clip": 0.2, "entropy_coef": 0.01, "value_coef": 0.5, "kl_coef": 0.1}
    plain = appo_loss(**inputs, valid_mask=None, **options)
    masked = appo_loss(**inputs, valid_mask=torch.ones(256, dtype=torch.bool), **options)
    assert plain.total.item() == pytest.approx(masked.total.item(), rel=1e-6)
    assert plain.total_value == plain.total.item()
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "ratio_mean"):
        assert getattr(plain, key) == pytest.approx(getattr(masked, key), rel=1e-6), key


@pytest.mark.parametrize("autocast", [False, True])
def test_frames_enter_the_first_convolution_unscaled_in_its_dtype_channels_last(autocast):
    """daskrl/models/inputs/frames.py: one conversion straight to the dtype the convolution computes in, in the frames' own
    memory order, every pixel value exact (0-255 are integers bfloat16 holds)."""
    from daskrl.models.inputs.frames import frames_as_input

    frames = torch.randint(0, 256, (8, 84, 84, 4), dtype=torch.uint8)
    weight = torch.zeros(32, 4, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        x = frames_as_input(frames, weight)
    assert x.dtype == (torch.bfloat16 if autocast else torch.float32)
    assert torch.equal(x.float(), frames.permute(0, 3, 1, 2).float()) and x.shape == (8, 4, 84, 84)
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert frames_as_input(frames, weight.to(torch.bfloat16)).dtype == torch.bfloat16  # a sampler's bfloat16 weights


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_the_first_convolution_folds_the_pixel_scale_into_its_weights(precision):
    """FrameConv on uint8 frames gives what a Conv2d with the same parameters gives on the frames scaled to [0, 1],
    and the gradient of its weights is the same: the scale moved from the pixels into the weights, nothing else. In
    bfloat16 (a learner's autocast) the two round differently, within bfloat16's precision."""
    from torch import nn

    from daskrl.models.inputs.frames import FrameConv

    torch.manual_seed(0)
    folded, plain = FrameConv(4, 32, 8, stride=4), nn.Conv2d(4, 32, 8, stride=4)
    plain.load_state_dict(folded.state_dict())  # the same parameter names: checkpoints load either way
    frames = torch.randint(0, 256, (16, 84, 84, 4), dtype=torch.uint8)
    scaled = frames.permute(0, 3, 1, 2).float() / 255.0
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
        ours, theirs = folded(frames), plain(scaled)
    ours.float().square().sum().backward()
    theirs.float().square().sum().backward()
    tol = 1e-5 if precision == "float32" else 2e-2
    assert ours.dtype == theirs.dtype
    assert torch.allclose(ours.float(), theirs.float(), rtol=tol, atol=tol)
    assert torch.allclose(folded.weight.grad, plain.weight.grad, rtol=tol, atol=tol * plain.weight.grad.abs().max())


def test_a_repeatable_run_pins_the_standard_tanh_whatever_the_timing_says(monkeypatch):
    """--deterministic and --record-schedule pin torch.tanh: the timing came out either way from one fresh process to
    the next on a 2-core machine, and two learners that chose differently round differently from their first step."""
    monkeypatch.setattr(activations, "_timed_choice", lambda: True)
    monkeypatch.setattr(activations, "_PINNED", set())
    assert activations.sigmoid_is_faster()
    activations.pin_standard_tanh()
    assert not activations.sigmoid_is_faster()
    x = torch.linspace(-3, 3, 101)
    assert torch.equal(activations.Tanh()(x), torch.tanh(x))
