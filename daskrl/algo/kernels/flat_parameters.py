"""A model's parameters and their gradients as views of one flat buffer each.

Why: on a CPU torch's "foreach" operators are a loop over tensors, so clipping the gradient norm and Adam's fused
step cost one kernel call per parameter tensor (12 for CartPole's MLP actor-critic: about 220 of the 1,100 us a
minibatch took once its backward pass was written out). Over one buffer each is a single call: the norm of the
flat gradient, one scale, one fused Adam update (:class:`~daskrl.algo.kernels.eager_optim.EagerAdam` steps flat when its
parameters and gradients are these views). The model sees no difference: every parameter is the same
``nn.Parameter``, its data a view of :attr:`FlatParameters.values`; ``load_state_dict`` copies into the views.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class FlatParameters:
    """``values`` and ``grads``: one buffer each, every parameter (and the gradient a trainer writes for it) a view of
    it, in the order given."""

    def __init__(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        self.params = list(parameters)
        if len({(p.device, p.dtype) for p in self.params}) != 1:
            raise ValueError("flat parameters need every parameter on one device in one dtype")
        with torch.no_grad():
            self.values = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.grads = torch.zeros_like(self.values)
        self._grad_views: dict[int, torch.Tensor] = {}
        offset = 0
        for p in self.params:
            n = p.numel()
            p.data = self.values[offset:offset + n].view_as(p)
            self._grad_views[id(p)] = self.grads[offset:offset + n].view_as(p)
            offset += n
        self._pointers = [p.data_ptr() for p in self.params]

    def grad_of(self, param: torch.nn.Parameter) -> torch.Tensor:
        """The view of :attr:`grads` that holds ``param``'s gradient (write it there, then set it as ``.grad``)."""
        return self._grad_views[id(param)]

    def intact(self) -> bool:
        """Whether every parameter's data is still its view of :attr:`values` (not if something gave a parameter new
        memory, ``module.to()`` say)."""
        return [p.data_ptr() for p in self.params] == self._pointers

    def holds_gradients(self) -> bool:
        """Whether every parameter's data and ``.grad`` are still the views (a learner group's summed gradients, or
        weights moved to new memory, are not: then the per-tensor paths run)."""
        return all(p.grad is self._grad_views[id(p)] for p in self.params) and self.intact()

    def clip_(self, max_norm: float) -> float:
        """``clip_grad_norm_`` over the flat gradient: its norm (the norm of the per-tensor norms, computed at once;
        equal up to float rounding), every gradient scaled by min(1, max_norm / (norm + 1e-6)) where that is below 1
        (and by 1 nowhere: nothing to do); -> the norm, read back (the trainer logs it)."""
        total = torch.linalg.vector_norm(self.grads, 2.0).item()
        scale = max_norm / (total + 1e-6)
        if scale < 1.0:
            self.grads.mul_(scale)
        return total
