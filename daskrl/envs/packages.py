"""``--env-packages``: modules imported before an env id is resolved, in the driver and in every process that builds
envs or models (as rl-zoo's ``--gym-packages``).

Why: many packages register their gymnasium ids when imported (``import minigrid`` registers
``MiniGrid-Empty-5x5-v0``), and a rollout worker, the evaluator or ``daskrl enjoy`` is another process, or runs
later, where nothing imported them. Naming them in the config makes the plain id work everywhere the config goes; a
module that registers daskrl envs or model components on import works the same way. (gymnasium's own
``module:EnvId`` spec imports the module too, for one id.)
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable

from daskrl.errors import ConfigError

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def package_names(values: Iterable[str]) -> list[str]:
    """The module names in ``values``, each of which may be a comma-separated list (``minigrid,procgen``)."""
    return [name.strip() for value in values for name in str(value).split(",") if name.strip()]


def env_package_problems(values: Iterable[str]) -> list[str]:
    """Import every module named; one line for each that is not a module name or cannot be imported."""
    problems = []
    for name in package_names(values):
        if not _MODULE.fullmatch(name):
            problems.append(f"--env-packages {name!r} is not a module name (such as minigrid or my_pkg.envs)")
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = exc.name or name
            if name == missing or name.startswith(missing + "."):  # the package itself is not installed
                problems.append(f"--env-packages: cannot import {name!r}: no module named {missing!r} "
                                f"(pip install {missing.split('.')[0]})")
            else:  # the package is there, one of its dependencies is not
                problems.append(f"--env-packages: importing {name!r} failed: it needs {missing!r}, which is not "
                                f"installed (pip install {missing.split('.')[0]})")
        except Exception as exc:  # whatever the package raises while importing
            problems.append(f"--env-packages: importing {name!r} failed ({type(exc).__name__}: {exc})")
    return problems


def import_env_packages(values: Iterable[str]) -> None:
    """Import the modules ``--env-packages`` names, or raise :class:`ConfigError` with a line for each that fails."""
    problems = env_package_problems(values)
    if problems:
        raise ConfigError(problems)
