"""Policy/value networks: encoders, recurrent cores, action distributions, the ActorCritic, and the registry that
names encoders and cores (and ships the user's to worker processes). No Dask here."""

from daskrl.models.actor_critic import ActorCritic, build_model
from daskrl.models.encoders import CnnEncoder, MlpEncoder, layer_init, make_encoder
from daskrl.models.heads import Categorical, DiagGaussian, MultiCategorical, make_action_head
from daskrl.models.recurrent import RecurrentCore
from daskrl.models.registry import register_core, register_encoder

__all__ = [
    "ActorCritic",
    "build_model",
    "Categorical",
    "CnnEncoder",
    "DiagGaussian",
    "MlpEncoder",
    "MultiCategorical",
    "RecurrentCore",
    "layer_init",
    "make_action_head",
    "make_encoder",
    "register_core",
    "register_encoder",
]
