"""The GPU paths no CPU machine runs: a learner's bfloat16 autocast on CUDA, a sampler's bfloat16 encoders on CUDA
(what an inference worker on ``--inference-device cuda`` runs with ``--inference-precision bfloat16``), and a run
whose inference worker acts on CUDA. They skip without CUDA; ``benchmarks/gpu_check.py`` runs them on a lent
machine (each name says cuda, for its ``-k "cuda or gpu"``)."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from daskrl.config import Config
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.actor_critic import build_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)")


def atari_spaces() -> EnvSpaces:
    return EnvSpaces.from_spaces(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), gym.spaces.Discrete(6))


def test_a_cuda_learner_under_bfloat16_autocast_gives_the_float32_loss_and_gradients_within_bounds():
    """The Nature CNN on a fixed batch of frames, on CUDA: the loss within 1%, each gradient pointing the same way
    (cosine above 0.99), the weights and gradients float32; and autocast really ran on the GPU (not bit-identical)."""
    torch.manual_seed(0)
    fp32 = build_model(atari_spaces(), Config().model, seed=1).cuda()
    bf16 = copy.deepcopy(fp32)
    bf16.train_encoders_in_bfloat16()
    obs = torch.randint(0, 256, (64, 84, 84, 4), dtype=torch.uint8, device="cuda")
    actions, targets = torch.randint(0, 6, (64,), device="cuda"), torch.randn(64, device="cuda")
    results = []
    for model in (fp32, bf16):
        model.zero_grad(set_to_none=True)
        log_probs, entropy, values = model.evaluate(obs, actions)
        assert log_probs.dtype == values.dtype == torch.float32
        loss = -(log_probs * targets).mean() + 0.5 * ((values - targets) ** 2).mean() - 0.01 * entropy.mean()
        loss.backward()
        results.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss32, grads32), (loss16, grads16) = results
    assert loss16 == pytest.approx(loss32, rel=1e-2)
    assert all(p.dtype == torch.float32 for p in bf16.parameters())
    cosines = {n: torch.nn.functional.cosine_similarity(grads16[n].flatten(), g.flatten(), dim=0).item()
               for n, g in grads32.items()}
    assert min(cosines.values()) > 0.99, cosines
    assert sum(torch.equal(grads16[n], g) for n, g in grads32.items()) < len(grads32) // 2


def test_cuda_inference_with_bfloat16_encoders_acts_as_the_cpu_float32_policy():
    """The most likely actions of 256 frames agree with the CPU's float32 policy on at least 95% (bfloat16 rounding
    may flip near-ties), and the values within 2% of their spread."""
    cpu = build_model(atari_spaces(), Config().model, seed=2)
    gpu = copy.deepcopy(cpu).cuda()
    gpu.use_bfloat16_encoders()
    frames = np.random.default_rng(0).integers(0, 256, (256, 84, 84, 4), dtype=np.uint8)
    cpu_actions, _, cpu_values = cpu.act(frames, deterministic=True)
    gpu_actions, _, gpu_values = gpu.act(frames, deterministic=True)
    assert np.mean(cpu_actions == gpu_actions) >= 0.95
    assert np.abs(gpu_values - cpu_values).max() <= 0.02 * (np.ptp(cpu_values) + 1e-3)


@pytest.mark.timeout(180)
def test_a_sampling_run_with_its_inference_worker_on_cuda(tmp_path):
    from daskrl import train

    config = Config().replace(env="CartPole-v1", sampling_only=True, inference="remote", inference_device="cuda",
                              num_workers=2, num_inference_workers=1, train_for_env_steps=0, train_for_seconds=10.0,
                              train_dir=str(tmp_path), experiment="cuda", dashboard_address="")
    summary = train(config)
    assert summary["env_steps"] > 10_000 and summary["episodes"] > 0, summary
