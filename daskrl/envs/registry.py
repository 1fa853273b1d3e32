"""Turn an env spec string into a gymnasium env (or a PettingZoo multi-agent env), with errors a user can act on.

A spec is resolved in this order: a name given to `register_env`, a
'package.module:factory' path (or gymnasium's 'module:EnvId'), then a gymnasium id
(also those a module named by --env-packages registered: daskrl/envs/packages.py).
Specs are strings (not callables) so they travel to remote workers as plain config. A factory may return a
PettingZoo ``ParallelEnv`` or ``AECEnv`` (``mpe2.simple_spread_v3:parallel_env``); it is returned unwrapped
(daskrl/envs/multi_agent.py steps it).
"""

from __future__ import annotations

import difflib
import importlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.config import MAX_ENVS_PER_WORKER, MAX_ROLLOUT_WORKERS
from daskrl.envs import owned_processes
from daskrl.envs.layouts.agent_spaces import is_multi_agent, multi_agent_spaces, seed_multi_agent
from daskrl.envs.layouts.index_obs import with_index_observations
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import EnvError

_REGISTRY: dict[str, Callable[..., gym.Env]] = {}
_PROBED: dict[tuple[str, str], EnvSpaces] = {}  # (spec, kwargs as JSON) -> its spaces

# Odd multiplier: a bijection modulo 2**31, so distinct (worker, env) slots never share a seed.
_SEED_MULT = 0x9E3779B1
_SEED_MOD = 2**31


def register_env(name: str, factory: Callable[..., gym.Env]) -> None:
    """Make `name` usable as a spec; re-registering replaces the factory (module reloads)."""
    if not isinstance(name, str) or not name:
        raise EnvError(f"register_env needs a non-empty string name, got {name!r}")
    if not callable(factory):
        raise EnvError(f"register_env({name!r}, ...): factory must be callable, got {type(factory).__name__}")
    _REGISTRY[name] = factory
    _PROBED.clear()


def registered_factory(name: str) -> Callable[..., gym.Env] | None:
    """The factory registered under `name` (shipped to workers, which do not share this registry)."""
    return _REGISTRY.get(name)


def make_env(
    spec: str,
    seed: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    render_mode: str | None = None,
) -> Any:
    """Build one env from `spec`; with `seed` the env and its action space are seeded.

    Gymnasium only seeds through `reset(seed=...)`, so a seeded env gets that one
    reset here; later plain `reset()` calls continue the seeded RNG deterministically.
    A multi-agent (PettingZoo) env is returned as the factory made it, seeded the same way.
    Processes and ``/dev/shm`` entries the env creates meanwhile end with its ``close`` or with this process,
    however it ends (:mod:`daskrl.envs.owned_processes`); an env that fails half-built leaves none behind.
    """
    with owned_processes.building() as before:
        try:
            env = _make_seeded(spec, seed, env_kwargs, render_mode)
        except BaseException:
            owned_processes.release(owned_processes.created_since(before))
            raise
        return owned_processes.track(env, before, was_reset=seed is not None)


def _make_seeded(spec: str, seed: int | None, env_kwargs: dict[str, Any] | None, render_mode: str | None) -> Any:
    if not isinstance(spec, str) or not spec:
        raise EnvError(f"Environment spec must be a non-empty string, got {spec!r}")
    kwargs = dict(env_kwargs or {})

    if spec in _REGISTRY:
        env = _build(spec, _REGISTRY[spec], kwargs, render_mode)
    elif ":" in spec:
        env = _build_from_path(spec, kwargs, render_mode)
    elif spec in gym.registry:
        env = _build(spec, lambda **kw: gym.make(spec, **kw), kwargs, render_mode, always_pass_render=True)
    else:
        raise EnvError(_unknown_message(spec))

    if is_multi_agent(env):
        if seed is not None:
            try:
                seed_multi_agent(env, seed)
            except Exception as exc:
                env.close()
                raise EnvError(f"Environment {spec!r} failed to reset with seed {seed}: {_describe(exc)}") from exc
        return env
    missing = [a for a in ("reset", "step", "observation_space", "action_space") if not hasattr(env, a)]
    if missing:
        raise EnvError(
            f"Environment {spec!r} built a {type(env).__name__}, which lacks {', '.join(missing)}; "
            "the factory must return a gymnasium.Env (or a PettingZoo ParallelEnv or AECEnv)."
        )
    env = with_index_observations(env)  # Discrete, MultiDiscrete and Tuple observations as a Dict
    if seed is not None:
        try:
            env.reset(seed=int(seed))
            env.action_space.seed(int(seed))
        except Exception as exc:
            env.close()
            raise EnvError(
                f"Environment {spec!r} failed to reset with seed {seed}: {_describe(exc)}"
            ) from exc
    return env


def env_seed(base_seed: int, worker_index: int, env_index: int) -> int:
    """Seed in [0, 2**31) for env `env_index` of worker `worker_index`, distinct within a run.

    Slots map injectively to seeds (odd multiplier mod 2**31), and the base seed is
    hashed so runs with nearby base seeds do not reuse each other's env seeds.
    """
    if not 0 <= worker_index < MAX_ROLLOUT_WORKERS:
        raise ValueError(f"worker_index must be in [0, {MAX_ROLLOUT_WORKERS}), got {worker_index}")
    if not 0 <= env_index < MAX_ENVS_PER_WORKER:
        raise ValueError(f"env_index must be in [0, {MAX_ENVS_PER_WORKER}), got {env_index}")
    base = int(np.random.SeedSequence(int(base_seed)).generate_state(1, dtype=np.uint32)[0])
    slot = worker_index * MAX_ENVS_PER_WORKER + env_index
    return (base + slot * _SEED_MULT) % _SEED_MOD


def split_seeds(seed: int | None, worker_index: int, first_env_index: int, num_envs: int) -> list[int] | None:
    """The seeds of a split's ``num_envs`` envs, env ``i`` of them being env ``first_env_index + i`` of its worker
    (:func:`env_seed`), for a batched backend that seeds them all in one call; None without a seed."""
    if seed is None:
        return None
    return [env_seed(seed, worker_index, first_env_index + i) for i in range(num_envs)]


def probe_env(spec: str, env_kwargs: dict[str, Any] | None = None, obs_keys: Sequence[str] = (),
              action_mask_key: str = "") -> EnvSpaces:
    """Build one env just to read its spaces, so spec errors surface before any worker starts. Remembered per spec
    and kwargs (an Atari env takes a noticeable fraction of a second to build), until the spec is registered anew.
    ``obs_keys`` and ``action_mask_key`` select the keys of Dict observations (see :meth:`EnvSpaces.from_spaces`).
    A multi-agent env's spaces are its agents' shared ones, with ``num_agents`` and ``agent_ids`` set."""
    key = (spec, json.dumps([env_kwargs or {}, list(obs_keys), action_mask_key], sort_keys=True, default=repr))
    if key not in _PROBED:
        env = make_env(spec, env_kwargs=env_kwargs)
        try:
            if is_multi_agent(env):
                _PROBED[key] = multi_agent_spaces(env, obs_keys, action_mask_key)
            else:
                _PROBED[key] = EnvSpaces.from_env(env, obs_keys, action_mask_key)
        finally:
            env.close()
    return _PROBED[key]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _build(
    spec: str,
    factory: Callable[..., gym.Env],
    kwargs: dict[str, Any],
    render_mode: str | None,
    always_pass_render: bool = False,
) -> gym.Env:
    # Factories that do not render need not accept render_mode, so only pass it when asked.
    if render_mode is not None or always_pass_render:
        kwargs = {**kwargs, "render_mode": render_mode}
    try:
        return factory(**kwargs)
    except EnvError:
        raise
    except Exception as exc:
        raise EnvError(f"Environment {spec!r} failed to build: {_describe(exc)}") from exc


def _build_from_path(spec: str, kwargs: dict[str, Any], render_mode: str | None) -> gym.Env:
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise EnvError(f"Environment {spec!r}: a path spec must look like 'package.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvError(
            f"Environment {spec!r}: cannot import module {module_name!r} ({_describe(exc)}); "
            "check the module path and that its package is installed on every worker."
        ) from exc

    factory: Any = module
    for part in attr_path.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            break
    if factory is None:
        # gymnasium's own 'module:EnvId' form: importing the module registers the id.
        if attr_path in gym.registry:
            return _build(spec, lambda **kw: gym.make(attr_path, **kw), kwargs, render_mode, True)
        raise EnvError(
            f"Environment {spec!r}: module {module_name!r} has no attribute {attr_path!r} "
            "and it is not a gymnasium id registered by that module; check the factory name."
        )
    if not callable(factory):
        raise EnvError(f"Environment {spec!r}: {attr_path!r} is a {type(factory).__name__}, not a callable")
    return _build(spec, factory, kwargs, render_mode)


#: a family of registered names (``doom/``) this small is listed whole when a name with its prefix is unknown
_LISTED_FAMILY_SIZE = 12


def _unknown_message(spec: str) -> str:
    prefix = spec.split("/", 1)[0] + "/" if "/" in spec else ""
    family = [name for name in _REGISTRY if prefix and name.startswith(prefix)]
    candidates = list(_REGISTRY) + list(gym.registry.keys())
    matches = difflib.get_close_matches(spec, candidates, n=1, cutoff=0.6)
    if family and len(family) <= _LISTED_FAMILY_SIZE:
        hint = f" (did you mean {matches[0]!r}?)" if matches else ""
        return f"Unknown environment {spec!r}{hint}: the {prefix} envs are {', '.join(family)}"
    hint = (
        f" (did you mean {matches[0]!r}?)"
        if matches
        else " (register it with daskrl.register_env or pass a 'package.module:factory' path)"
    )
    return (
        f"Unknown environment {spec!r}: it is not registered with daskrl.register_env, "
        f"not a 'module:factory' path, and not a gymnasium id{hint}; an id that a package registers when imported "
        f"needs that package named: 'package:{spec}' (gymnasium's form) or --env-packages package"
    )
