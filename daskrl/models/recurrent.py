"""The recurrent core (``--rnn lstm|gru``): between the encoder and the heads, one core shared by both heads.

Why one shared core: the value head then sees the same memory the policy acts on, and the sampler carries one
state per env, not two. The state of a batch of envs is one flat float32 array ``[B, state_size]`` (an LSTM's
``h`` then ``c``, each layer after the other), so samplers keep it in shared memory and trajectory slots store
it like any other field, with no knowledge of the cell.

Episode starts reset the state to zeros. In a sequence, ``starts[t]`` says the env's episode begins at step
``t``; :meth:`RecurrentCore.sequence` runs the cell over the stretches between resets in one call each (as fast
as an unbroken sequence where episodes are long) and is checked against a step-by-step loop in the tests.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from daskrl.config import ModelConfig
from daskrl.envs.spaces import EnvSpaces

#: values of ``--rnn``
RNN_KINDS = ("none", "lstm", "gru")


def core_size(model: ModelConfig, spaces: EnvSpaces) -> int:
    """``--rnn-size``, with 0 resolved: 256 for image observations (a CNN's 512 features), 64 otherwise."""
    if model.rnn_size > 0:
        return int(model.rnn_size)
    return 256 if spaces.is_image else 64


def rnn_state_size(model: ModelConfig, spaces: EnvSpaces) -> int:
    """Floats of state per env (0 for a feed-forward model): what a sampler keeps and a slot stores."""
    if model.rnn == "none":
        return 0
    return (2 if model.rnn == "lstm" else 1) * int(model.rnn_layers) * core_size(model, spaces)


class RecurrentCore(nn.Module):
    """An ``nn.LSTM`` or ``nn.GRU`` (time-major) over encoder features, with flat states (see the module
    docstring)."""

    def __init__(self, kind: str, in_dim: int, size: int, layers: int) -> None:
        super().__init__()
        if kind not in ("lstm", "gru"):
            raise ValueError(f"unknown recurrent core {kind!r}: choose one of {', '.join(RNN_KINDS)}")
        self.kind, self.size, self.layers = kind, int(size), int(layers)
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(int(in_dim), self.size, self.layers)
        for name, param in self.rnn.named_parameters():  # orthogonal weights, zero biases: stable early updates
            if name.startswith("weight"):
                nn.init.orthogonal_(param)
            else:
                nn.init.zeros_(param)
        self.out_dim = self.size
        self.state_size = (2 if kind == "lstm" else 1) * self.layers * self.size

    def initial_state(self, batch: int, device: torch.device | None = None) -> torch.Tensor:
        return torch.zeros(batch, self.state_size, device=device)

    def _unpack(self, state: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """[B, S] -> the cell's ``h`` (or ``(h, c)``), each [layers, B, size]."""
        b = state.shape[0]
        parts = state.reshape(b, -1, self.layers, self.size).permute(1, 2, 0, 3)
        return (parts[0].contiguous(), parts[1].contiguous()) if self.kind == "lstm" else parts[0].contiguous()

    def _pack(self, hx: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        parts = torch.stack(hx) if self.kind == "lstm" else hx.unsqueeze(0)  # [1 or 2, layers, B, size]
        return parts.permute(2, 0, 1, 3).reshape(parts.shape[2], self.state_size)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: features [B, F] and states [B, S] -> (outputs [B, size], next states [B, S])."""
        out, hx = self.rnn(x.unsqueeze(0), self._unpack(state))
        return out[0], self._pack(hx)

    def sequence(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor | None,
                 keep: Iterable[int] = ()) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Features [T, B, F] from states [B, S]; ``starts`` [T, B] (or None) zeroes an env's state before the
        step where its episode begins, step 0 included. Returns (outputs [T, B, size], ``before``): the states
        entering step ``t``, before any reset at ``t``, for ``t`` in ``keep``, at every reset and at ``T`` (the
        state after the last step)."""
        T = x.shape[0]
        resets: set[int] = set()
        if starts is not None:
            resets = {int(t) for t in torch.nonzero(starts.reshape(T, -1).any(1)).reshape(-1).tolist()}
        bounds = sorted({0, T} | resets | {int(t) for t in keep if 0 <= int(t) < T})
        outs, before = [], {}
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            before[a] = state
            if a in resets:
                state = state * (1.0 - starts[a].to(state.dtype)).unsqueeze(-1)
            out, hx = self.rnn(x[a:b], self._unpack(state))
            state = self._pack(hx)
            outs.append(out)
        before[T] = state
        return torch.cat(outs) if len(outs) > 1 else outs[0], before


def make_core(model: ModelConfig, spaces: EnvSpaces, in_dim: int) -> RecurrentCore | None:
    """The core ``--rnn`` asks for over features of width ``in_dim`` (None: feed-forward)."""
    if model.rnn == "none":
        return None
    return RecurrentCore(model.rnn, in_dim, core_size(model, spaces), model.rnn_layers)
