"""bfloat16 encoders for samplers (``--inference-precision``): close to float32, log-probs exact for the policy
that acted, weights loaded by rounding, and the 'auto' rule that picks them."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from daskrl.config import Config, ConfigError, ModelConfig
from daskrl.envs import probe_env
from daskrl.models import ActorCritic
from daskrl.models.inputs.frames import FrameConv
from daskrl.sampling.policies import policy as sampling_policy
from daskrl.sampling.policies.policy import SamplingPolicy, cpu_has_native_bfloat16, resolve_precision
from daskrl.setups import PolicySetup


def perturbed_model(spec: str, seed: int = 0) -> ActorCritic:
    """A model away from the near-uniform initial policy, so precision differences reach the log-probs."""
    torch.manual_seed(seed)
    model = ActorCritic(probe_env(spec))
    with torch.no_grad():
        for p in list(model.actor.parameters()) + list(model.critic.parameters()):
            p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def some_obs(spec: str, n: int = 64) -> np.ndarray:
    """Observations the env itself produced (random actions), as a rollout worker would see them."""
    from daskrl.envs import make_env

    env = make_env(spec)
    obs, _ = env.reset(seed=0)
    out = []
    while len(out) < n:
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        out.append(obs)
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.stack(out)


@pytest.mark.parametrize("spec", ["daskrl/Catch-v0", "atari/Breakout", "CartPole-v1", "Pendulum-v1"])
def test_bfloat16_encoders_stay_close_to_float32_and_write_their_own_log_probs(spec):
    fp32 = perturbed_model(spec)
    bf16 = copy.deepcopy(fp32)
    bf16.use_bfloat16_encoders()
    encoders = [bf16.encoder] + ([bf16.value_encoder] if bf16.value_encoder is not None else [])
    # every encoder weight in bfloat16 but an image encoder's first convolution's (see the next test)
    assert all(p.dtype == (torch.float32 if isinstance(m, FrameConv) else torch.bfloat16)
               for e in encoders for m in e.modules() for p in m.parameters(recurse=False))
    assert all(p.dtype == torch.float32 for p in list(bf16.actor.parameters()) + list(bf16.critic.parameters()))

    obs = some_obs(spec)
    actions, log_probs, values = bf16.act(obs)
    assert log_probs.dtype == np.float32 and values.dtype == np.float32
    t_obs, t_actions = torch.from_numpy(obs), torch.from_numpy(actions)
    with torch.no_grad():
        own_lp, _, own_v = bf16.evaluate(t_obs, t_actions)
        ref_lp, _, ref_v = fp32.evaluate(t_obs, t_actions)
        features16 = bf16._encode(bf16.encoder, bf16.prepare(t_obs)[0])
        features32 = fp32.encoder(fp32.prepare(t_obs)[0])
    # the heads ran in float32 on the bfloat16 features: the log-prob written is the acting policy's own
    np.testing.assert_allclose(log_probs, own_lp.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(values, own_v.numpy(), rtol=0, atol=1e-6)
    # it really computed in bfloat16 (8 significant bits), and that moved the policy only a little
    assert features16.dtype == torch.float32
    error = ((features16 - features32).norm() / features32.norm()).item()
    assert 1e-4 < error < 0.02, error
    assert np.abs(log_probs - ref_lp.numpy()).max() < 0.05
    np.testing.assert_allclose(values, ref_v.numpy(), rtol=0.05, atol=0.05)


def test_a_bfloat16_sampler_and_learner_compute_the_same_first_convolution():
    """A sampler's first convolution scales its float32 weights before autocast rounds them, as the learner's
    autocast does: the same bfloat16 weights, so the same outputs to the bit (rounded to bfloat16 first, then scaled
    and rounded again, about a quarter of the weights were one bfloat16 step off)."""
    learner = perturbed_model("daskrl/Catch-v0", seed=0)
    learner.train_encoders_in_bfloat16()
    sampler = copy.deepcopy(learner)
    sampler.use_bfloat16_encoders()
    first = [m for m in sampler.encoder.modules() if isinstance(m, FrameConv)]
    assert len(first) == 1 and first[0].weight.dtype == torch.float32
    frames = torch.from_numpy(some_obs("daskrl/Catch-v0", 32))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ours = first[0](frames)
        theirs = next(m for m in learner.encoder.modules() if isinstance(m, FrameConv))(frames)
    assert ours.dtype == torch.bfloat16 and torch.equal(ours, theirs)


def test_weights_loaded_into_bfloat16_encoders_are_rounded_in():
    """A sampler loads each float32 parameter version into its bfloat16 model."""
    model = perturbed_model("daskrl/Catch-v0", seed=0)
    model.use_bfloat16_encoders()
    newer = perturbed_model("daskrl/Catch-v0", seed=1)
    obs = some_obs("daskrl/Catch-v0", 16)
    before = model.act(obs, deterministic=True)[2]
    model.load_state_dict_numpy(newer.state_dict_numpy())
    assert all(p.dtype == (torch.float32 if isinstance(m, FrameConv) else torch.bfloat16)
               for m in model.encoder.modules() for p in m.parameters(recurse=False))
    after, expected = model.act(obs, deterministic=True)[2], newer.act(obs, deterministic=True)[2]
    assert np.abs(after - expected).max() < 0.05 < np.abs(before - expected).max()


def test_auto_picks_bfloat16_for_image_policies_on_cpus_that_have_it(monkeypatch):
    image, vector = probe_env("daskrl/Catch-v0"), probe_env("CartPole-v1")
    for native in (True, False):
        monkeypatch.setattr(sampling_policy, "cpu_has_native_bfloat16", lambda native=native: native)
        assert resolve_precision("auto", image) == ("bfloat16" if native else "float32")
        assert resolve_precision("auto", vector) == "float32"
        for explicit in ("float32", "bfloat16"):
            assert resolve_precision(explicit, image) == resolve_precision(explicit, vector) == explicit
    with pytest.raises(ValueError, match="one of auto, float32, bfloat16, got 'fp16'"):
        resolve_precision("fp16", image)


def test_cpu_flags_decide_native_bfloat16(tmp_path):
    def cpuinfo(flags: str) -> str:
        path = tmp_path / f"cpuinfo_{len(list(tmp_path.iterdir()))}"
        path.write_text(f"processor\t: 0\nmodel name\t: test\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        return str(path)

    assert cpu_has_native_bfloat16(cpuinfo("fpu sse avx2 avx512f avx512bw avx512_bf16 avx512_vnni"))
    assert cpu_has_native_bfloat16(cpuinfo("fpu avx512f amx_bf16 amx_tile"))
    # AVX-512 without BF16 only emulates bfloat16 (slower than float32); "bf16" alone is not an x86 flag we trust
    assert not cpu_has_native_bfloat16(cpuinfo("fpu sse avx2 avx512f avx512bw avx512_vnni bf16"))
    assert not cpu_has_native_bfloat16(str(tmp_path / "missing"))


def test_sampling_policy_keeps_the_numpy_path_for_float32_only():
    threads = torch.get_num_threads()  # SamplingPolicy pins torch to one thread, as a worker wants
    try:
        spaces = probe_env("CartPole-v1")
        fast = SamplingPolicy(None, PolicySetup(spaces, ModelConfig(), None, 0, True, "float32", "cpu", {}, None, None,
                                                False, None))
        slow = SamplingPolicy(None, PolicySetup(spaces, ModelConfig(), None, 0, True, "bfloat16", "cpu", {}, None, None,
                                                False, None))
    finally:
        torch.set_num_threads(threads)
    assert fast.fast is not None and fast.model.encoder_dtype == torch.float32
    assert slow.fast is None and slow.model.encoder_dtype == torch.bfloat16 and slow.precision == "bfloat16"
    actions, log_probs, _ = slow.act(some_obs("CartPole-v1", 8).astype(np.float32))
    assert actions.shape == (8,) and np.all(log_probs < 0)


def test_a_bad_precision_is_a_config_error():
    config = Config.from_flat({"inference_precision": "half"})
    with pytest.raises(ConfigError, match="--inference-precision must be one of auto, float32, bfloat16, got 'half'"):
        config.validate()
