"""The core between the encoder and the heads: recurrent (``--rnn lstm|gru``), one core shared by both heads, or
feed-forward (``--rnn none``), the identity.

Why a feed-forward core: the model's paths then ask the core, not "is there a core": the identity passes features
through and refuses a state, a recurrent core refuses to run without one (see :class:`FeedForwardCore`).

Why one shared core: the value head then sees the same memory the policy acts on, and the sampler carries one
state per env, not two. The state of a batch of envs is one flat float32 array ``[B, state_size]`` (an LSTM's
``h`` then ``c``, each layer after the other), so samplers keep it in shared memory and trajectory slots store
it like any other field, with no knowledge of the cell.

Episode starts reset the state to zeros. In a sequence, ``starts[t]`` says the env's episode begins at step
``t``; :meth:`RecurrentCore.sequence` runs the cell over the stretches between resets in one call each (as fast
as an unbroken sequence where episodes are long) and is checked against a step-by-step loop in the tests.

The cell is looked up by name (``daskrl.models.registry``): ``lstm`` and ``gru`` are torch's, and a user's
``register_core(name, cls)`` adds one called the same way (see its docstring), so ``--rnn name`` works with every
sampler and the learner's BPTT without knowing the cell.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from daskrl.config import ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.core_state import core_size, state_parts
from daskrl.models.heads import Distribution
from daskrl.models.registry import lookup, register_builtin

#: built-in values of ``--rnn`` (``register_core`` adds more)
RNN_KINDS = ("none", "lstm", "gru")
register_builtin("core", lstm=nn.LSTM, gru=nn.GRU)


class RecurrentCore(nn.Module):
    """An ``nn.LSTM``, ``nn.GRU`` or registered cell (time-major) over encoder features, with flat states (see the
    module docstring)."""

    def __init__(self, kind: str, in_dim: int, size: int, layers: int) -> None:
        super().__init__()
        self.kind, self.size, self.layers = kind, int(size), int(layers)
        self.parts = state_parts(kind)
        self.rnn = lookup("core", kind)(int(in_dim), self.size, self.layers)
        if isinstance(self.rnn, (nn.LSTM, nn.GRU)):  # orthogonal weights, zero biases: stable early updates
            for name, param in self.rnn.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(param)
                else:
                    nn.init.zeros_(param)
        self.out_dim = self.size
        self.state_size = self.parts * self.layers * self.size
        if not isinstance(self.rnn, (nn.LSTM, nn.GRU)):
            self._check_cell(int(in_dim))

    def _check_cell(self, in_dim: int) -> None:
        """A registered cell that answers in other shapes is one readable line, not a reshape error mid-run."""
        how = "it must be called like torch.nn.GRU (or nn.LSTM, with state_parts = 2): see daskrl.models.register_core"
        try:
            with torch.no_grad():
                out, hx = self.rnn(torch.zeros(2, 3, in_dim), self._unpack(torch.zeros(3, self.state_size)))
            got = [tuple(out.shape)] + [tuple(h.shape) for h in (hx if isinstance(hx, tuple) else (hx,))]
        except Exception as exc:  # whatever the user's cell raises
            raise ValueError(f"recurrent core {self.kind!r} failed on 2 steps of 3 envs ({type(exc).__name__}: "
                             f"{exc}); {how}") from exc
        want = [(2, 3, self.size)] + [(self.layers, 3, self.size)] * self.parts
        if got != want:
            raise ValueError(f"recurrent core {self.kind!r} returned shapes {got} for 2 steps of 3 envs, not {want}; "
                             f"{how}")

    def stateless(self, x: torch.Tensor) -> torch.Tensor:
        """A recurrent model has no path without its state: ``forward()`` and ``value()`` refuse it here."""
        raise TypeError("a recurrent model needs its state: use step(), value_step() or evaluate_sequence()")

    def act(self, model: nn.Module, obs: torch.Tensor, state: np.ndarray | None) -> tuple[Distribution, torch.Tensor]:
        """How ``ActorCritic.act`` runs ``model``, a recurrent ActorCritic: from the states ``state`` [batch, S]
        (float32 numpy), writing the next states there, in place (a sampler's shared memory, say)."""
        if state is None:
            raise TypeError("a recurrent model acts from its state: pass state=")
        dist, value, next_state = model.step(obs, torch.as_tensor(np.asarray(state), device=obs.device))
        state[...] = next_state.cpu().numpy()
        return dist, value

    def initial_state(self, batch: int, device: torch.device | None = None) -> torch.Tensor:
        return torch.zeros(batch, self.state_size, device=device)

    def _unpack(self, state: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """[B, S] -> the cell's ``h`` (or ``(h, c)``), each [layers, B, size]."""
        b = state.shape[0]
        parts = state.reshape(b, self.parts, self.layers, self.size).permute(1, 2, 0, 3)
        return tuple(p.contiguous() for p in parts) if self.parts > 1 else parts[0].contiguous()

    def _pack(self, hx: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        parts = torch.stack(hx) if isinstance(hx, tuple) else hx.unsqueeze(0)  # [parts, layers, B, size]
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


class FeedForwardCore(nn.Module):
    """``--rnn none``: the identity between the encoder and the heads, with no state (size 0) and no parameters,
    so no ``core.*`` keys in the model's state_dict. The stateful paths refuse it with a TypeError, as a recurrent
    core refuses the stateless ones."""

    state_size = 0

    def __init__(self, in_dim: int) -> None:
        super().__init__()
        self.out_dim = int(in_dim)

    def stateless(self, x: torch.Tensor) -> torch.Tensor:
        """Features pass through: the heads read the encoder's."""
        return x

    def act(self, model: nn.Module, obs: torch.Tensor, state: np.ndarray | None) -> tuple[Distribution, torch.Tensor]:
        """How ``ActorCritic.act`` runs ``model``, a feed-forward ActorCritic: from the observations alone
        (``state`` unread)."""
        return model(obs)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise TypeError("a feed-forward model has no state: use forward() or value()")

    def sequence(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor | None,
                 keep: Iterable[int] = ()) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        raise TypeError("a feed-forward model learns from shuffled steps: use evaluate(), not evaluate_sequence()")


Core = FeedForwardCore | RecurrentCore


def make_core(model: ModelConfig, spaces: EnvSpaces, in_dim: int) -> Core:
    """The core ``--rnn`` asks for over features of width ``in_dim``."""
    if model.rnn == "none":
        return FeedForwardCore(in_dim)
    return RecurrentCore(model.rnn, in_dim, core_size(model, spaces), model.rnn_layers)
