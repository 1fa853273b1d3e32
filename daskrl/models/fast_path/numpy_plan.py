"""The numpy fast path's plan: which keys of a model's state dict make each layer, and the constants it acts with.

Why a plan: a sampler on the numpy path should not need torch at all (importing it costs a process about 0.7 s and
100 MB). The learner has the torch model, so it writes down, once, what :class:`~daskrl.models.fast_path.numpy_policy.
NumpyPolicy` needs besides the weights (layer keys in order, activations, the recurrent cell, the action head's
kind and bounds) and ships it with its parameter block's description; the sampler then acts from the published
weights alone. A model the numpy path cannot compute has no plan (None) and its samplers build the torch model.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from daskrl.models.actor_critic import ActorCritic
from daskrl.models.heads import ClippedGaussian
from daskrl.models.inputs.dict_encoder import DictEncoder
from daskrl.models.inputs.encoders import MlpEncoder
from daskrl.models.recurrent import RecurrentCore

#: the activations the numpy path computes, by their torch module's class name
ACTIVATIONS = ("Tanh", "ReLU")


def supports(model: ActorCritic) -> bool:
    """Whether :class:`NumpyPolicy` computes ``model``'s ``act``: MLP encoders (matching, when separate) of flat
    observations or of Dict records whose keys are all float vectors (concatenated, an action mask beside them),
    daskrl's LSTM/GRU core or none, a Discrete head or a state-independent Gaussian one (clipped or not)."""
    if model.spaces.action_kind not in ("discrete", "box") or model.spaces.is_image:
        return False
    if model.spaces.is_dict and not all(_flat_record_encoder(e) for e in model.encoders):
        return False  # images, indices and keys with encoders of their own stay with torch
    if model.recurrent and (type(model.core) is not RecurrentCore or type(model.core.rnn) not in (nn.LSTM, nn.GRU)):
        return False  # a registered core: only torch knows it
    if model.spaces.action_kind == "box" and (model.actor.distribution not in (None, ClippedGaussian)
                                              or model.actor.state_std):
        return False  # tanh squashing, and a log-std that depends on the state, stay with torch
    patterns = []
    for encoder in model.encoders:
        mlp = encoder.mlp if type(encoder) is DictEncoder else encoder
        if type(mlp) is not MlpEncoder:  # a registered subclass may compute otherwise: torch runs it
            return False
        pattern = [type(layer).__name__ for layer in mlp.net]
        if any(name != "Linear" and name not in ACTIVATIONS for name in pattern):
            return False
        patterns.append(pattern)
    return all(p == patterns[0] for p in patterns)  # separate encoders fuse only when they match


def _flat_record_encoder(encoder: nn.Module) -> bool:
    """A :class:`DictEncoder` that concatenates float vectors into its MLP and encodes no key on its own."""
    return type(encoder) is DictEncoder and not encoder.own and encoder.mlp is not None \
        and all(k.kind == "box" and k.dtype == "float32" for k in encoder.mlp_keys)


def numpy_plan(model: ActorCritic) -> dict[str, Any] | None:
    """Plain data (lists, strings, numbers) naming ``model``'s state-dict keys per layer, or None where
    :func:`supports` says no."""
    if not supports(model):
        return None
    names = {id(module): name for name, module in model.named_modules()}

    def linear(layer: nn.Module) -> dict[str, Any]:
        return {"weight": f"{names[id(layer)]}.weight", "bias": f"{names[id(layer)]}.bias", "activation": None}

    encoders = []
    for encoder in model.encoders:  # the policy's, then the value's where separate
        layers: list[dict[str, Any]] = []
        for layer in (encoder.mlp if model.spaces.is_dict else encoder).net:
            if isinstance(layer, nn.Linear):
                layers.append(linear(layer))
            else:
                layers[-1]["activation"] = type(layer).__name__
        encoders.append(layers)
    kind = model.spaces.action_kind
    plan: dict[str, Any] = {
        "kind": kind, "action_shape": list(model.spaces.action_shape), "encoders": encoders,
        "head": linear(model.actor.logits if kind == "discrete" else model.actor.mean), "critic": linear(model.critic),
        "obs_norm": {"mean": "obs_mean", "var": "obs_var"} if model.normalize_obs else None, "core": None,
        "log_std": None, "bounds": None, "record": _record_plan(model)}
    if model.recurrent:
        core = model.core
        plan["core"] = {"cell": "lstm" if isinstance(core.rnn, nn.LSTM) else "gru", "layers": core.layers,
                        "size": core.size, "prefix": names[id(core.rnn)]}
    if kind == "box":
        plan["log_std"] = f"{names[id(model.actor)]}.log_std"
        if model.actor.distribution is ClippedGaussian:
            plan["bounds"] = [model.actor.low.tolist(), model.actor.high.tolist()]
    return plan


def _record_plan(model: ActorCritic) -> dict[str, Any] | None:
    """Where a Dict record's parts lie (byte offsets and sizes): the float vectors the MLP reads, in its order,
    and the action mask (None: flat observations)."""
    if not model.spaces.is_dict:
        return None
    mask = next((k for k in model.spaces.obs_keys if k.name == model.spaces.action_mask_key), None)
    return {"fields": [[k.offset, k.nbytes] for k in model.encoder.mlp_keys],
            "mask": None if mask is None else [mask.offset, mask.nbytes]}
