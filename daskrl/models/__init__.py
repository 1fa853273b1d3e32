"""Policy/value networks: encoders, action distributions and the ActorCritic (no Dask here)."""

from daskrl.models.actor_critic import ActorCritic, build_model
from daskrl.models.encoders import CnnEncoder, MlpEncoder, layer_init, make_encoder, register_encoder
from daskrl.models.heads import Categorical, DiagGaussian, MultiCategorical, make_action_head

__all__ = [
    "ActorCritic",
    "build_model",
    "Categorical",
    "CnnEncoder",
    "DiagGaussian",
    "MlpEncoder",
    "MultiCategorical",
    "layer_init",
    "make_action_head",
    "make_encoder",
    "register_encoder",
]
