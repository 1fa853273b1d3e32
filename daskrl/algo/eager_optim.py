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
``torch._dynamo`` unimported (tests/test_learner_kernels.py) says so. In a learner process this also means a user's
``torch.compile`` would trace those four methods instead of skipping them: daskrl's learners do not compile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import optimizer as _optimizer

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
    not the expected ones, and the wrapped step runs)."""

    _plain: Callable[..., Any] | None = None

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        if self._plain is None:
            return super().step(closure)  # type: ignore[misc]
        return self._plain(closure)


class EagerAdam(_EagerStep, torch.optim.Adam):
    """torch's Adam, stepped without its compiler wrapper (see the module docstring)."""

    _plain = _plain_step(torch.optim.Adam)


class EagerAdamW(_EagerStep, torch.optim.AdamW):
    """torch's AdamW, stepped without its compiler wrapper (see the module docstring)."""

    _plain = _plain_step(torch.optim.AdamW)


skip_compiler_wrappers()
