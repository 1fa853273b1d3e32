"""The activations an MLP encoder is built with (``--activation``), with a faster tanh on CPUs.

Why a tanh of our own: torch's CPU tanh kernel costs about 2 ns an element on this project's machines, its sigmoid
about 0.25 ns (``benchmarks/bench_learner.py``'s MLP learner spent 30% of a training step in tanh). tanh(x) is
2 * sigmoid(2x) - 1 exactly, so :class:`Tanh` computes it that way, and its gradient from the output, as torch's
does (1 - y^2). The result differs from ``torch.tanh`` by float rounding (at most a few 1e-7, where a small x
loses digits to the subtraction). Traced and exported graphs (TorchScript, torch.export/ONNX), GPUs and other
dtypes than float32 (a sampler's bfloat16 encoders) get the standard op.
"""

from __future__ import annotations

import torch
from torch import nn


class _SigmoidTanh(torch.autograd.Function):
    """tanh through sigmoid, with tanh's own backward kernel on the saved output."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        y = sigmoid_tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def sigmoid_tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) as 2 * sigmoid(2x) - 1 (no graph: see :class:`Tanh` for the differentiable one)."""
    return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)


class Tanh(nn.Tanh):
    """``nn.Tanh`` (same name, same state, same export) computed through sigmoid on the CPU (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32 or torch.jit.is_tracing() \
                or torch.compiler.is_compiling():
            return torch.tanh(x)  # bfloat16's 8 bits would lose a small tanh to the subtraction
        if torch.is_grad_enabled() and x.requires_grad:
            return _SigmoidTanh.apply(x)
        return sigmoid_tanh(x)


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}
