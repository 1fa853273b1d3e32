"""SAC's twin critics Q_1(s, a), Q_2(s, a): networks apart from the actor, which the samplers never need.

Vector observations under the MLP encoder: each critic is one MLP of ``[observation, action]``, of the actor's hidden
sizes and activation (the paper's critics, and SB3's and CleanRL's). Other observations (images, Dict observations,
a registered encoder): each critic encodes the observation with an encoder of its own, built as the actor's (the
Nature CNN, per-key Dict encoders: :mod:`daskrl.models.inputs.observations`), and reads ``[features, action]`` through one
more hidden layer of the MLP's width. The observations come in prepared by the actor (:meth:`ActorCritic.prepare`:
normalized with its statistics), so actor and critics see the same inputs.

Why not one design for both: an encoder of the observation alone followed by a hidden layer of ``[features,
action]`` gives an MLP critic one hidden layer more than the reference critics, and the critics' updates are most of
an SAC update on a CPU (``benchmarks/bench_offpolicy_update.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from daskrl.config import ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.inputs.encoders import ACTIVATIONS, MlpEncoder, layer_init
from daskrl.models.inputs.observations import EncoderInput, observation_adapter


class TwinQ(nn.Module):
    """Two independent critics of (observation, action) pairs (see the module docstring for their two designs)."""

    def __init__(self, spaces: EnvSpaces, model: ModelConfig, joint: bool | None = None) -> None:
        """``joint``: each critic one MLP of [observation, action] (None: where the observations allow it; False:
        the layout of checkpoints saved before daskrl built MLP critics so)."""
        super().__init__()
        adapter = observation_adapter(spaces, model)
        encoders = [adapter.build_encoder() for _ in range(2)]
        self.joint = all(type(encoder) is MlpEncoder for encoder in encoders) if joint is None else joint
        if self.joint:
            encoders = [MlpEncoder(spaces.obs_dim + spaces.action_dim, model.hidden_sizes, model.activation)
                        for _ in range(2)]
        self.encoders = nn.ModuleList(encoders)
        width = int(model.hidden_sizes[-1]) if model.hidden_sizes else 64
        self.heads = nn.ModuleList([
            layer_init(nn.Linear(encoder.out_dim, 1), std=1.0) if self.joint else
            nn.Sequential(layer_init(nn.Linear(encoder.out_dim + spaces.action_dim, width)),
                          ACTIVATIONS[model.activation](), layer_init(nn.Linear(width, 1), std=1.0))
            for encoder in self.encoders])

    def forward(self, inputs: EncoderInput, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs`` prepared by the actor, ``actions`` [B, action_dim] -> (Q_1, Q_2), each [B]."""
        actions = actions.reshape(actions.shape[0], -1).float()
        if self.joint:
            both = torch.cat([inputs.reshape(inputs.shape[0], -1).float(), actions], -1)
            q1, q2 = (head(encoder(both)).squeeze(-1) for encoder, head in zip(self.encoders, self.heads, strict=True))
        else:
            q1, q2 = (head(torch.cat([encoder(inputs), actions], -1)).squeeze(-1)
                      for encoder, head in zip(self.encoders, self.heads, strict=True))
        return q1, q2
