"""A model of your own: an encoder and a recurrent core defined right here, registered, and trained on CartPole-v1.

    python examples/custom_model.py                  # the residual MLP encoder (feed-forward)
    python examples/custom_model.py --core lngru     # + the layer-normalized GRU core (recurrent)

``register_encoder`` and ``register_core`` make the names usable as ``--encoder`` and ``--rnn``. The learner and
the rollout (or inference) workers build the model in worker processes of their own, where this script never
ran: daskrl sends what was registered here along with each component's setup (a class defined in a script
travels by value, one from an installed module by reference) and registers it there before the model is built.
So the classes need not live in an importable module; registering them under the ``__main__`` guard is enough.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import daskrl
from daskrl.evaluation import enjoy
from daskrl.models import register_core, register_encoder


class ResidualMlp(nn.Module):
    """A linear stem and ``blocks`` pre-activation residual blocks: ``x + W2 tanh(W1 tanh(x))``."""

    def __init__(self, obs_dim: int, width: int = 64, blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Linear(obs_dim, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width))
            for _ in range(blocks))
        for block in self.blocks:  # each block starts as the identity, so depth does not slow early learning
            nn.init.zeros_(block[-1].weight)
            nn.init.zeros_(block[-1].bias)
        self.out_dim = width  # what the heads (or the core) after the encoder take

    @classmethod
    def from_spaces(cls, spaces, **kwargs) -> ResidualMlp:
        """How daskrl builds an encoder: from the env's spaces (``spaces.obs_dim``, ``obs_shape``, ``is_image``)."""
        return cls(spaces.obs_dim, **kwargs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.stem(obs.reshape(obs.shape[0], -1).float())
        for block in self.blocks:
            x = x + block(x)
        return torch.tanh(x)


class LayerNormGru(nn.Module):
    """A GRU cell whose state is layer-normalized at every step, called like ``torch.nn.GRU`` (time-major):
    ``(x [T, B, in_dim], h [layers, B, size]) -> (out [T, B, size], h_n [layers, B, size])``. daskrl keeps the
    state per env, zeroes it at episode starts and cuts sequences for truncated BPTT around this call."""

    def __init__(self, in_dim: int, size: int, layers: int) -> None:
        super().__init__()
        if layers != 1:
            raise ValueError("LayerNormGru has one layer (--rnn-layers 1)")
        self.cell = nn.GRUCell(in_dim, size)
        self.norm = nn.LayerNorm(size)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, outs = h[0], []
        for t in range(x.shape[0]):
            h = self.norm(self.cell(x[t], h))
            outs.append(h)
        return torch.stack(outs), h.unsqueeze(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", default="none", choices=["none", "lngru"], help="the recurrent core (--rnn)")
    parser.add_argument("--seconds", type=float, default=120.0, help="give up after this many seconds")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    register_encoder("resmlp", ResidualMlp)
    register_core("lngru", LayerNormGru)
    config = daskrl.Config.from_flat({
        "env": "CartPole-v1", "encoder": "resmlp", "rnn": args.core, "seed": args.seed,
        "experiment": f"custom_model_{args.core}", "overwrite": True, "stop_at_return": 475.0,
        "train_for_seconds": args.seconds, "train_for_env_steps": 0})
    summary = daskrl.train(config)  # the embedded cluster: a learner and rollout workers, each a process of its own
    print(f"--encoder resmlp --rnn {args.core}: mean return {summary['episode_return_mean']:.1f} after "
          f"{summary['env_steps']:,} env steps")
    result = enjoy(summary["experiment_dir"], episodes=10, deterministic=True)  # here, where they are registered
    print(f"evaluation (10 episodes, most likely actions): {result['return_mean']:.1f} ± {result['return_std']:.1f}")


if __name__ == "__main__":  # worker processes are started fresh: keep the guard
    main()
