"""Adam and AdamW that never import ``torch._dynamo``: the learner's optimizers run eagerly, never compiled.

Why: torch.optim imports ``torch._dynamo`` (0.7 s of CPU on this project's machines, as much as torch itself) the
first time an optimizer adds a parameter group, saves or loads its state or zeroes gradients (methods wrapped so that
a compiled program does not trace them) and on every ``Adam.step`` (to mark graph breaks for the compiler). daskrl
never compiles the optimizer, so these wrappers only cost start-up: a learner process paid the import before its
first training step, or the worker forkserver preloaded it and every embedded cluster started 0.7 s later.

:func:`skip_compiler_wrappers` marks torch.optim.Optimizer's four wrapped methods as already resolved to
themselves (the cache torch keeps on each wrapped function after its first call, so its wrapper no longer imports
anything), and :class:`EagerAdam` / :class:`EagerAdamW` step with Adam's own update under ``torch.no_grad`` (what
the step wrapper does when not compiling). Both read torch internals: where they are not as expected (another torch
version) nothing is changed, the optimizers behave as torch's, and the test that a training step leaves
``torch._dynamo`` unimported (tests/drills/test_learner_kernels.py) says so. In a learner process this also means a user's
``torch.compile`` would trace those four methods instead of skipping them: daskrl's learners do not compile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import optimizer as _optimizer

if TYPE_CHECKING:
    from daskrl.algo.kernels.flat_parameters import FlatParameters

#: the code of the wrapper torch puts around methods a compiled program must not trace
_DISABLE_WRAPPER = torch._disable_dynamo(lambda: None).__code__
#: the code of the wrappers around Optimizer.step: the no-grad/graph-break one and the profiler's
_STEP_WRAPPERS = {_optimizer._use_grad_for_differentiable(lambda: None).__code__,
                  torch.optim.Optimizer.profile_hook_step(lambda: None).__code__}


def skip_compiler_wrappers() -> bool:
    """Resolve torch.optim.Optimizer's compiler-disabling wrappers to the plain methods (see the module docstring);
    False when torch's methods are not wrapped as expected (nothing changed)."""
    found = False
    for name in ("add_param_group", "state_dict", "load_state_dict", "zero_grad"):
        method = vars(torch.optim.Optimizer).get(name)
        plain = getattr(method, "__wrapped__", None)
        if plain is not None and getattr(method, "__code__", None) is _DISABLE_WRAPPER:
            setattr(plain, "__dynamo_disable", plain)  # the cache torch's wrapper reads before importing dynamo
            found = True
    return found


def _plain_step(cls: type[torch.optim.Optimizer]) -> Callable[..., Any] | None:
    """``cls.step`` without torch's wrappers (None when they are not the expected ones)."""
    step = cls.step
    while getattr(step, "__code__", None) in _STEP_WRAPPERS:
        step = getattr(step, "__wrapped__", None)
    return step if getattr(step, "__code__", None) is not None and step is not cls.step else None


class _EagerStep:
    """``step`` with the optimizer's own update under ``torch.no_grad`` (``_plain``: None where torch's wrappers were
    not the expected ones, and the wrapped step runs); once every parameter has its moments, a fused optimizer's
    step is the fused kernel alone (:meth:`_fused_step`), and ``zero_grad()`` only drops the gradients."""

    _plain: Callable[..., Any] | None = None

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        if closure is None and self._fused_step():
            return None
        if self._plain is None:
            return super().step(closure)  # type: ignore[misc]
        return self._plain(closure)

    def _fused_step(self) -> bool:
        """torch's fused Adam(W) update of every parameter, called as ``torch.optim.adam._fused_adam`` calls it (the
        same kernel, arguments and state: the same result to the bit), without the Python that surrounds it on each
        step (state checks, grouping by device and dtype: 130 us of a 145 us step of a CartPole MLP's 12 tensors);
        over one flat buffer each, one call, where the parameters and gradients are :meth:`step_flat` views (the same
        update to float rounding: the kernel's vector lanes then fall at other elements).
        False, and nothing done, for what that path does not cover: several groups, amsgrad, maximize, a tensor
        learning rate, a parameter without a gradient or without moments yet (the first step makes them), mixed
        devices or dtypes."""
        moments = self._fused_moments()
        if moments is None:
            return False
        group = self.param_groups[0]  # type: ignore[attr-defined]
        params = group["params"]
        grads = [p.grad for p in params]
        exp_avgs, exp_avg_sqs, steps = moments
        flat = self._flat
        if any(g is None or g.is_sparse for g in grads):
            self._unshare_steps()
            return False
        if self._flat_moments is None:
            torch._foreach_add_(steps, 1)
        else:
            steps[0].add_(1)  # the one step count every parameter's state shares
            if flat is not None and flat.holds_gradients():
                params, grads, steps = [flat.values], [flat.grads], steps[:1]
                exp_avgs, exp_avg_sqs = [self._flat_moments[0]], [self._flat_moments[1]]
        beta1, beta2 = group["betas"]
        kernel = torch._fused_adamw_ if group.get("decoupled_weight_decay") else torch._fused_adam_
        kernel(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=group["lr"], beta1=beta1,
               beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"], maximize=False, grad_scale=None,
               found_inf=None)
        return True

    _flat: FlatParameters | None = None
    #: (exp_avg, exp_avg_sq) of every parameter as one buffer each, the per-parameter moments their views
    _flat_moments: tuple[torch.Tensor, torch.Tensor] | None = None

    def step_flat(self, flat: FlatParameters) -> None:
        """Update ``flat``'s buffers in one fused call whenever its gradient views are the gradients (its parameters
        must be this optimizer's, in order); the moments become views of one buffer each at the next step."""
        self._unshare_steps()
        self._flat = flat

    _moments: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]] | None = None

    def _fused_moments(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]] | None:
        """(exp_avgs, exp_avg_sqs, steps) of every parameter when the fused path applies (see :meth:`_fused_step`),
        gathered once and kept until the state or the groups change; None otherwise."""
        if self._moments is not None:
            return self._moments
        if len(self.param_groups) != 1:  # type: ignore[attr-defined]
            return None
        group = self.param_groups[0]  # type: ignore[attr-defined]
        params = group["params"]
        if not params or not group.get("fused") or group["amsgrad"] or group["maximize"] \
                or group["differentiable"] or group["capturable"] or isinstance(group["lr"], torch.Tensor) \
                or len({(p.device, p.dtype) for p in params}) != 1:
            return None
        states = [self.state.get(p) for p in params]  # type: ignore[attr-defined]
        if not all(states):
            return None  # the first step makes the moments
        self._moments = ([s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                         [s["step"] for s in states])
        self._flatten_moments(params, states)
        return self._moments

    def _flatten_moments(self, params: list[torch.nn.Parameter], states: list[dict[str, Any]]) -> None:
        """With :meth:`step_flat`'s buffers for these very parameters (and one step count for all), gather the moments
        into one buffer each and make every parameter's state a view of it (checkpoints see the same state), and let
        every state share one step count tensor (one increment a step, not one per parameter)."""
        flat = self._flat
        if flat is None or [id(p) for p in params] != [id(p) for p in flat.params] \
                or len({float(s["step"]) for s in states}) != 1:
            return
        flat_moments = []
        for key in ("exp_avg", "exp_avg_sq"):
            buffer = torch.cat([s[key].reshape(-1) for s in states])
            offset = 0
            for s in states:
                n = s[key].numel()
                s[key] = buffer[offset:offset + n].view_as(s[key])
                offset += n
            flat_moments.append(buffer)
        for s in states:
            s["step"] = states[0]["step"]
        self._flat_moments = (flat_moments[0], flat_moments[1])
        self._moments = ([s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                         [s["step"] for s in states])

    def _unshare_steps(self) -> None:
        """Give every parameter's state its own step count again (torch's step, which the update falls back to,
        increments each state's), and gather the moments anew at the next step."""
        if self._flat_moments is not None:
            for p in self.param_groups[0]["params"]:  # type: ignore[attr-defined]
                state = self.state[p]  # type: ignore[attr-defined]
                state["step"] = state["step"].clone()
        self._moments = self._flat_moments = None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._moments = self._flat_moments = None  # new moment tensors
        super().load_state_dict(state_dict)  # type: ignore[misc]

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self._unshare_steps()
        super().add_param_group(param_group)  # type: ignore[misc]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every gradient (torch's zero_grad does the same, inside a profiler scope: 55 us a call there)."""
        if not set_to_none:
            return super().zero_grad(set_to_none)  # type: ignore[misc]
        for group in self.param_groups:  # type: ignore[attr-defined]
            for p in group["params"]:
                p.grad = None
        return None


def step_unwrapped(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``; for this module's optimizers without the wrapper torch.optim puts around every optimizer
    class's ``step`` (a profiler scope and the step hooks: 70 us of a CartPole minibatch's 1 ms, against 15 us of
    fused Adam arithmetic), where no step hook is registered, so that the wrapper would do nothing else."""
    if isinstance(optimizer, _EagerStep) and not _may_have_step_hooks(optimizer):
        _EagerStep.step(optimizer)  # the class's own method (under no_grad): torch wrapped only its subclasses'
    else:
        optimizer.step()


def _may_have_step_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Whether a step hook is registered on ``optimizer`` or for every optimizer (True where torch keeps them
    elsewhere than this torch does: the wrapped step then runs, hooks and all)."""
    hooks = [getattr(optimizer, "_optimizer_step_pre_hooks", None), getattr(optimizer, "_optimizer_step_post_hooks", None),
             getattr(_optimizer, "_global_optimizer_pre_hooks", None),
             getattr(_optimizer, "_global_optimizer_post_hooks", None)]
    return any(h is None or len(h) > 0 for h in hooks)


class EagerAdam(_EagerStep, torch.optim.Adam):
    """torch's Adam, stepped without its compiler wrapper (see the module docstring)."""

    _plain = _plain_step(torch.optim.Adam)


class EagerAdamW(_EagerStep, torch.optim.AdamW):
    """torch's AdamW, stepped without its compiler wrapper (see the module docstring)."""

    _plain = _plain_step(torch.optim.AdamW)


skip_compiler_wrappers()
