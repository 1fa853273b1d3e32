"""Names a package exports without importing their modules until first use (PEP 562's module ``__getattr__``).

Why: ``daskrl.models`` and ``daskrl.algo`` export torch-heavy names, and the driver imports their torch-free modules
(the model registry, the trajectory batch): importing a submodule runs its package's ``__init__`` first, which must
then import nothing heavy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, homes: dict[str, str], submodules: bool = False) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: name -> the attribute of ``package.<homes[name]>``, imported then.

    With ``submodules``, any other name is the submodule of that name (``daskrl.envs`` stays reachable as an
    attribute, as it was when the package imported its submodules eagerly).
    """

    def __getattr__(name: str) -> Any:
        if name in homes:
            return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        if submodules:
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise  # the submodule exists and one of its own imports is missing: say that one
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__


def class_at(path: str) -> Any:
    """The class a ``"module:class"`` path names, imported now: a record can name a torch-heavy class (an
    algorithm's learner or trainer) that only the process using it imports."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
