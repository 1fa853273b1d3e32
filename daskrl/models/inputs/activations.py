"""The activations an MLP encoder is built with (``--activation``), with the CPU's faster tanh.

Why a tanh of our own: torch's CPU tanh kernel is fast on some CPUs and slow on others. On this project's AMD
machines it cost about 2 ns an element against 0.25 ns for sigmoid (``benchmarks/bench_learner.py``'s MLP learner
spent 30% of a training step in tanh); on its Intel machines (Sapphire Rapids) tanh costs 0.27 ns and computing it
through sigmoid made the same learner 18% slower. tanh(x) is 2 * sigmoid(2x) - 1 exactly, so :class:`Tanh` times
both ways once per process (:func:`sigmoid_is_faster`, about a millisecond) and takes the faster: through sigmoid it
computes its gradient from the output, as torch's does (1 - y^2), and differs from ``torch.tanh`` by float rounding
(at most a few 1e-7, where a small x loses digits to the subtraction). Traced and exported graphs (TorchScript,
torch.export/ONNX), GPUs and other dtypes than float32 (a sampler's bfloat16 encoders) get the standard op.

A process whose run must repeat (``--deterministic``, ``--record-schedule`` and ``daskrl replay``) takes the standard
op too (:func:`pin_standard_tanh`): where the two ways cost about the same, the timing comes out either way from one
process to the next (on this project's 2-core machine, True in one of three fresh processes), and a learner that
chose otherwise than its twin rounds otherwise from its first step.
"""

from __future__ import annotations

import functools
import math
import time

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


def sigmoid_tanh_(x: torch.Tensor) -> torch.Tensor:
    """:func:`sigmoid_tanh` in place (the same operations on ``x``'s memory; no graph)."""
    return torch.sigmoid_(x.mul_(2.0)).mul_(2.0).sub_(1.0)


#: set once this process takes ``torch.tanh`` whatever the timing says (:func:`pin_standard_tanh`)
_PINNED: set[str] = set()


def pin_standard_tanh() -> None:
    """Take ``torch.tanh`` in this process from now on (see the module docstring): call it before the first model is
    built, since a learner's kernels choose when they are built."""
    _PINNED.add("tanh")


def sigmoid_is_faster() -> bool:
    """Whether this process computes tanh through sigmoid: where it is the faster way (:func:`_timed_choice`), unless
    the process pinned the standard op."""
    return "tanh" not in _PINNED and _timed_choice()


@functools.cache
def _timed_choice() -> bool:
    """Whether tanh through sigmoid beats ``torch.tanh`` on this CPU, for a minibatch of a 64-unit layer: the best
    of several interleaved timings of each (interleaved, so a busy neighbour slows both alike). Its input comes from a
    generator of its own: a draw from torch's global one would shift every sampled action after the first forward
    pass in a process (``daskrl enjoy`` would play other episodes in a fresh process than in a later call)."""
    x = torch.randn(512, 64, generator=torch.Generator().manual_seed(0))
    best = {torch.tanh: math.inf, sigmoid_tanh: math.inf}
    for _ in range(15):
        for kernel in best:
            start = time.perf_counter()
            kernel(x)
            best[kernel] = min(best[kernel], time.perf_counter() - start)
    return best[sigmoid_tanh] < best[torch.tanh]


class Tanh(nn.Tanh):
    """``nn.Tanh`` (same name, same state, same export), through sigmoid on CPUs where that is faster (module
    docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32 or torch.jit.is_tracing() \
                or torch.compiler.is_compiling() or not sigmoid_is_faster():
            return torch.tanh(x)  # bfloat16's 8 bits would lose a small tanh to the subtraction
        if torch.is_grad_enabled() and x.requires_grad:
            return _SigmoidTanh.apply(x)
        return sigmoid_tanh(x)


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}
