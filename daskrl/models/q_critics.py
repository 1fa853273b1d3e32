"""SAC's twin critics Q_1(s, a), Q_2(s, a): networks apart from the actor, which the samplers never need.

Each critic encodes the observation with an encoder of its own, built as the actor's (the MLP, the Nature CNN, per-key
Dict encoders: :mod:`daskrl.models.observations`), and reads ``[features, action]`` through one more hidden layer of
the MLP's width. The observations come in prepared by the actor (:meth:`ActorCritic.prepare`: normalized with its
statistics), so actor and critics see the same inputs.
"""

from __future__ import annotations

import torch
from torch import nn

from daskrl.config import ModelConfig
from daskrl.envs.spaces import EnvSpaces
from daskrl.models.encoders import ACTIVATIONS, layer_init
from daskrl.models.observations import EncoderInput, observation_adapter


class TwinQ(nn.Module):
    """Two independent critics of (observation, action) pairs."""

    def __init__(self, spaces: EnvSpaces, model: ModelConfig) -> None:
        super().__init__()
        adapter = observation_adapter(spaces, model)
        self.encoders = nn.ModuleList([adapter.build_encoder() for _ in range(2)])
        width = int(model.hidden_sizes[-1]) if model.hidden_sizes else 64
        self.heads = nn.ModuleList([
            nn.Sequential(layer_init(nn.Linear(encoder.out_dim + spaces.action_dim, width)),
                          ACTIVATIONS[model.activation](), layer_init(nn.Linear(width, 1), std=1.0))
            for encoder in self.encoders])

    def forward(self, inputs: EncoderInput, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs`` prepared by the actor, ``actions`` [B, action_dim] -> (Q_1, Q_2), each [B]."""
        actions = actions.reshape(actions.shape[0], -1).float()
        q1, q2 = (head(torch.cat([encoder(inputs), actions], -1)).squeeze(-1)
                  for encoder, head in zip(self.encoders, self.heads, strict=True))
        return q1, q2
