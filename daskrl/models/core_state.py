"""How much recurrent state a policy carries per env: what samplers keep and trajectory slots store.

Apart from :mod:`daskrl.models.recurrent` so that sizing a run (``daskrl.driver.launch.sizing``, which the command line runs
before any process starts) imports torch only for a recurrent model, whose cell it must look at.
"""

from __future__ import annotations

from daskrl.config import ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.registry import lookup


def state_parts(kind: str) -> int:
    """Tensors in a cell's state: 2 for an LSTM's ``(h, c)``, else a registered cell's ``state_parts`` (1)."""
    cell = lookup("core", kind)
    from torch import nn  # imported with the cell already

    return 2 if isinstance(cell, type) and issubclass(cell, nn.LSTM) else int(getattr(cell, "state_parts", 1))


def core_size(model: ModelConfig, spaces: EnvSpaces) -> int:
    """``--rnn-size``, with 0 resolved: 256 for image observations (a CNN's 512 features), 64 otherwise."""
    if model.rnn_size > 0:
        return int(model.rnn_size)
    return 256 if spaces.is_image else 64


def rnn_state_size(model: ModelConfig, spaces: EnvSpaces) -> int:
    """Floats of state per env (0 for a feed-forward model): what a sampler keeps and a slot stores."""
    if model.rnn == "none":
        return 0
    return state_parts(model.rnn) * int(model.rnn_layers) * core_size(model, spaces)
