"""A state value network V(s) apart from the actor, for learners that fit one of their own (IQL's expectile value).

Built as :class:`~daskrl.models.q_critics.TwinQ` builds its critics' encoders: the actor's encoder for this env's
observations (an MLP of the actor's hidden sizes and activation for vector observations, the Nature CNN or per-key
Dict encoders otherwise), then one linear output. It reads observations prepared by the actor
(:meth:`~daskrl.models.actor_critic.ActorCritic.prepare`), so it sees them normalized as the actor does. The actor's
own value head is not used: samplers publish it, and its encoder may be shared with the policy's.
"""

from __future__ import annotations

import torch
from torch import nn

from daskrl.config import ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.inputs.encoders import layer_init
from daskrl.models.inputs.observations import EncoderInput, observation_adapter


class StateValue(nn.Module):
    """V(s): an encoder of the observation and a linear output."""

    def __init__(self, spaces: EnvSpaces, model: ModelConfig) -> None:
        super().__init__()
        self.encoder = observation_adapter(spaces, model).build_encoder()
        self.head = layer_init(nn.Linear(self.encoder.out_dim, 1), std=1.0)

    def forward(self, inputs: EncoderInput) -> torch.Tensor:
        """``inputs`` prepared by the actor -> V [B]."""
        return self.head(self.encoder(inputs)).squeeze(-1)
