"""A feed-forward MLP actor-critic's minibatch gradient, differentiated by hand instead of through autograd's graph.

Why: a small MLP's training step is mostly per-operator overhead, not arithmetic. With CartPole's policy (two
64-unit towers, two actions) a 512-sample minibatch's forward pass, APPO loss and backward pass through autograd is
some 300 operators and graph nodes at a few microseconds each around about 300 us of matrix and tanh arithmetic
(``benchmarks/bench_learner.py``'s MLP learner). Written out, the same derivatives are about 60 operators: each
layer's backward is its two matrix products, a bias sum and the activation's derivative from the saved output, and
the loss's is a few vector operations (:mod:`~daskrl.algo.kernels.appo_loss_gradients`). The gradients are autograd's up
to float rounding (a test compares them on every parameter).

It covers the models most classic-control and Box2D runs train, on a CPU learner: MLP encoders (one shared, or one
per head) of Linear layers with tanh or ReLU, no recurrent core, and a Discrete action head. Anything else (images,
Dict observations, Gaussian or composite heads, other activations, bfloat16 encoders, a KL penalty, a GPU) trains
through autograd, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from torch import nn

from daskrl.algo.kernels.appo_loss_gradients import LossGradients, appo_loss_gradients
from daskrl.algo.kernels.flat_parameters import FlatParameters
from daskrl.models.heads import CategoricalHead
from daskrl.models.inputs import activations
from daskrl.models.inputs.activations import Tanh, sigmoid_tanh_
from daskrl.models.inputs.encoders import MlpEncoder

if TYPE_CHECKING:
    from daskrl.algo.appo.loss import LossOutput
    from daskrl.models.actor_critic import ActorCritic

#: each activation the backward pass knows, by its exact class (a subclass may compute otherwise): its gradient from
#: the upstream gradient and the layer's saved output
ACTIVATION_GRADIENTS: dict[type[nn.Module], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Tanh: torch.ops.aten.tanh_backward,  # g * (1 - y^2)
    nn.Tanh: torch.ops.aten.tanh_backward,
    nn.ReLU: lambda grad, out: torch.ops.aten.threshold_backward(grad, out, 0),  # g where y > 0
}

Kernel = Callable[[torch.Tensor], torch.Tensor]


class _Layer(NamedTuple):
    """One Linear layer and the activation after it (None: the tower's output is linear), as plain tensors and
    functions: no module lookups, and no graph, on the way."""

    weight: torch.nn.Parameter  # the parameters, whose ``.grad`` the backward pass sets
    bias: torch.nn.Parameter
    w: torch.Tensor  # their values, detached: operations on them record nothing for autograd
    b: torch.Tensor
    wt: torch.Tensor  # w transposed (a view), as the forward pass multiplies by it
    weight_grad: torch.Tensor  # the views of the flat gradient buffer the backward pass writes
    bias_grad: torch.Tensor
    activation: Kernel | None
    activation_grad: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None


class Forward(NamedTuple):
    """One minibatch's forward pass, with what the backward pass reads; the action head's part in numpy (a few
    microseconds an operation on [B, A], where torch's logsumexp alone took 44 us in a training step)."""

    policy: list[torch.Tensor]  # the policy tower's input, then each layer's output
    value: list[torch.Tensor]  # the value tower's (the policy's own list when the encoder is shared)
    log_policy: np.ndarray  # [A, B] normalized log-probabilities of every action
    probs: np.ndarray  # [A, B]
    entropy: np.ndarray  # [B]
    values: torch.Tensor  # [B]


class MlpGradients:
    """The forward pass and the hand-written backward pass of one :class:`ActorCritic` (see the module docstring);
    ``supports(model)`` says whether it applies."""

    def __init__(self, model: ActorCritic, flat: FlatParameters) -> None:
        """``flat``: ``model``'s parameters as one buffer, whose gradient views the backward pass writes into."""
        if not self.supports(model):
            raise ValueError("MlpGradients differentiates feed-forward MLP actor-critics with a Discrete head only")
        self.model = model
        #: the policy's tower, then the value's where it has its own
        self.towers = [_layers(encoder.net, flat) for encoder in model.encoders]
        self.head = _layers([model.actor.logits], flat)[0]
        self.critic = _layers([model.critic], flat)[0]

    @staticmethod
    def supports(model: ActorCritic) -> bool:
        """Whether this class computes ``model``'s gradients (the module docstring says which models it covers)."""
        if model.recurrent or model.encoder_autocast is not None or type(model.actor) is not CategoricalHead:
            return False
        if model.critic.weight.device.type != "cpu":  # a GPU's cost is launches, not these; the loss's part is numpy
            return False
        if model.spaces.is_image or model.spaces.is_dict:
            return False
        for encoder in model.encoders:
            if type(encoder) is not MlpEncoder:  # a registered subclass may compute otherwise: autograd runs it
                return False
            if any(type(layer) is not nn.Linear and type(layer) not in ACTIVATION_GRADIENTS for layer in encoder.net):
                return False
        return True

    def prepare(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations [B, ...] as the encoders read them, [B, D] float32: normalized with the model's statistics
        where it normalizes (once for a whole training step, whose statistics do not change, not per minibatch)."""
        with torch.no_grad():
            x = self.model.prepare(obs)[0]
        return x.reshape(x.shape[0], -1).float()

    def forward(self, x: torch.Tensor) -> Forward:
        """The policy and values of prepared observations ``x`` [B, D] (:meth:`prepare`), keeping each layer's
        output."""
        policy = _tower_forward(self.towers[0], x)
        value = _tower_forward(self.towers[-1], x) if len(self.towers) > 1 else policy
        shifted = self._shifted_logits(policy[-1])
        exps = np.exp(shifted)
        sums = exps.sum(0)
        log_policy = shifted - np.log(sums)
        probs = exps / sums
        entropy = -(probs * log_policy).sum(0)
        return Forward(policy, value, log_policy, probs, entropy, self._values(value[-1]))

    def evaluate(self, x: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probabilities of ``actions`` [B], values [B]) at prepared observations ``x`` [B, D], keeping no layer's
        output: the no-gradient pass a training step makes over its whole batch (V-trace's target log-probs)."""
        policy = _tower_forward(self.towers[0], x)[-1]
        shifted = self._shifted_logits(policy)
        log_probs = shifted[_taken(actions)] - np.log(np.exp(shifted).sum(0))
        value = _tower_forward(self.towers[-1], x)[-1] if len(self.towers) > 1 else policy
        return torch.from_numpy(log_probs), self._values(value)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """[B] values at prepared observations ``x`` [B, D] (bootstrap values), through the value's tower alone."""
        return self._values(_tower_forward(self.towers[-1], x)[-1])

    def _shifted_logits(self, features: torch.Tensor) -> np.ndarray:
        """The action head's logits as [A, B], one row per action, less each column's largest (numpy's reductions
        over actions are then whole-row operations, not a loop over B rows of A entries)."""
        logits = torch.addmm(self.head.b.unsqueeze(1), self.head.w, features.t()).numpy()
        return logits - logits.max(0)

    def _values(self, features: torch.Tensor) -> torch.Tensor:
        """[B] the critic's values of the value tower's output ``features`` [B, H]."""
        return torch.addmm(self.critic.b, features, self.critic.wt).squeeze(-1)

    @staticmethod
    def log_probs(forward: Forward, actions: torch.Tensor) -> torch.Tensor:
        """[B] log-probabilities of ``actions`` [B]."""
        return torch.from_numpy(forward.log_policy[_taken(actions)])

    @staticmethod
    def entropy(forward: Forward) -> torch.Tensor:
        """[B] the policy's entropy at each observation."""
        return torch.from_numpy(forward.entropy)

    def appo_gradients(self, mb: dict[str, torch.Tensor], advantages: torch.Tensor, valid: torch.Tensor | None,
                       scale: float, **options: float) -> LossOutput:
        """A minibatch's APPO loss, and ``scale`` times its gradient in every parameter's ``.grad`` (the flat
        buffer's views) when the loss is finite: this forward pass, the loss's derivatives
        (:func:`~daskrl.algo.kernels.appo_loss_gradients.appo_loss_gradients`, with the loss's ``options``), this
        backward pass. ``mb``: the trainer's minibatch (prepared observations, actions, behaviour log-probs, the
        values and value targets of the pass over the batch)."""
        forward = self.forward(mb["obs"])
        actions = mb["actions"]
        out, grads = appo_loss_gradients(self.log_probs(forward, actions), mb["old_lp"], advantages, forward.values,
                                         mb["old_v"], mb["targets"], self.entropy(forward), valid, scale=scale,
                                         **options)
        if math.isfinite(out.total_value):
            self.backward(forward, actions, grads)
        return out

    def backward(self, forward: Forward, actions: torch.Tensor, grads: LossGradients) -> None:
        """Set every parameter's ``.grad`` to the gradient of the loss whose derivatives with respect to the log-probs
        of ``actions``, the entropies and the values are ``grads``."""
        # log_policy = logits - logsumexp(logits): d lp(a) / d logits = onehot(a) - p; d H / d logits = -p (log p + H)
        g_lp = grads.log_probs.numpy()
        g_logits = forward.probs * (forward.log_policy + forward.entropy) * -grads.entropy.numpy()
        g_logits -= forward.probs * g_lp
        g_logits[_taken(actions)] += g_lp
        g_logits = torch.from_numpy(g_logits).t()  # [B, A], as the layer's backward takes it
        g_values = grads.values.unsqueeze(-1)
        g_policy = _linear_backward(self.head, forward.policy[-1], g_logits)
        g_value = _linear_backward(self.critic, forward.value[-1], g_values)
        if len(self.towers) == 1:
            _tower_backward(self.towers[0], forward.policy, g_policy + g_value)
        else:
            _tower_backward(self.towers[0], forward.policy, g_policy)
            _tower_backward(self.towers[1], forward.value, g_value)


def _linear_backward(layer: _Layer, inputs: torch.Tensor, grad: torch.Tensor, wants_input: bool = True
                     ) -> torch.Tensor:
    """Write a linear map's weight and bias gradients from ``grad`` [B, out] at its output into their flat views
    (which are their ``.grad``); -> the gradient at its input [B, in] (``grad`` itself without ``wants_input``)."""
    torch.mm(grad.t(), inputs, out=layer.weight_grad)
    torch.sum(grad, 0, out=layer.bias_grad)
    if layer.weight.grad is not layer.weight_grad:  # the trainer dropped them (a skipped update): the views again
        layer.weight.grad = layer.weight_grad
    if layer.bias.grad is not layer.bias_grad:
        layer.bias.grad = layer.bias_grad
    return grad @ layer.w if wants_input else grad


def _taken(actions: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The index of each sample's action in an [A, B] array."""
    taken = actions.numpy()
    return taken, np.arange(taken.shape[0])


def _layers(modules: Iterable[nn.Module], flat: FlatParameters) -> list[_Layer]:
    """A stack of Linear layers, each with the activation after it, as :class:`_Layer` records (their gradients'
    views in ``flat``)."""
    layers: list[_Layer] = []
    for module in modules:
        if isinstance(module, nn.Linear):
            weight, bias = module.weight, module.bias
            w = weight.detach()
            layers.append(_Layer(weight, bias, w, bias.detach(), w.t(), flat.grad_of(weight), flat.grad_of(bias),
                                 None, None))
        else:
            layers[-1] = layers[-1]._replace(activation=_kernel(module), activation_grad=ACTIVATION_GRADIENTS[type(module)])
    return layers


def _kernel(activation: nn.Module) -> Kernel:
    """The function ``activation`` computes on a CPU's float32 tensors (daskrl's tanh: the kernel it picked for this
    CPU), in place on the linear map's fresh output (the backward pass reads only the activation's output), called
    without the module's checks on every call."""
    if type(activation) is Tanh:
        return sigmoid_tanh_ if activations.sigmoid_is_faster() else torch.tanh_
    return torch.tanh_ if type(activation) is nn.Tanh else torch.relu_


def _tower_forward(layers: list[_Layer], x: torch.Tensor) -> list[torch.Tensor]:
    """[x, each layer's output]: the linear map as ``nn.Linear`` computes it, then the activation."""
    outputs = [x]
    for layer in layers:
        x = torch.addmm(layer.b, x, layer.wt)
        if layer.activation is not None:
            x = layer.activation(x)
        outputs.append(x)
    return outputs


def _tower_backward(layers: list[_Layer], outputs: list[torch.Tensor], grad: torch.Tensor) -> None:
    """Set the tower's gradients from ``grad``, the gradient at its output; ``outputs`` from
    :func:`_tower_forward` (the tower's input needs no gradient: observations)."""
    for i in range(len(layers) - 1, -1, -1):
        layer = layers[i]
        if layer.activation_grad is not None:
            grad = layer.activation_grad(grad, outputs[i + 1])
        if i == 0:
            _linear_backward(layer, outputs[0], grad, wants_input=False)
        else:
            grad = _linear_backward(layer, outputs[i], grad)
