"""Model components by name: the encoders ``--encoder`` names and the recurrent cores ``--rnn`` names, built in or
registered by the user, and how the user's registrations reach the worker processes.

Why names: a run's config stays plain data (JSON, flags), and every process builds the same network from it.

Why shipping: the processes that build the model (rollout workers acting inline, inference workers, learners) are
not the process where the user's script registered its classes, so what it registered is unknown there. As env
factories travel (``daskrl.envs.registry.registered_factory``), the registrations travel in the component setups
(:func:`pack_components`, with cloudpickle: a class defined in a script travels by value, one from an importable
module by reference) and are installed in the worker before it builds the model (:func:`install_components`).
Every user registration travels, not only those ``--encoder`` and ``--rnn`` name, so a dict observation's per-key
encoders, looked up by name in the same table, are there too; each travels on its own, so one that cannot be sent
or loaded fails only a run that uses it, with the reason.

Built-in components register themselves where they are defined (``encoders.py``, ``recurrent.py``); their names are
also listed here (:data:`BUILTIN`), so that checking a run's options does not import those modules, and torch with
them: the command line checks a run before the process that will use torch has started.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

import cloudpickle

#: name -> class (or factory); see register_encoder and register_core for how each is built
_ENCODERS: dict[str, Callable[..., Any]] = {}
_CORES: dict[str, Callable[..., Any]] = {}
_TABLES = {"encoder": _ENCODERS, "core": _CORES}
_LABELS = {"encoder": "encoder", "core": "recurrent core"}
_RESERVED = {"encoder": ("auto",), "core": ("none",)}  # values of --encoder and --rnn that are no component
#: daskrl's own components: kind -> (the module that defines and registers them, their names)
BUILTIN = {"encoder": ("daskrl.models.inputs.encoders", ("mlp", "cnn", "small_cnn", "impala")),
           "core": ("daskrl.models.recurrent", ("lstm", "gru"))}
_USER: set[tuple[str, str]] = set()  # (kind, name) registered by the user: what travels to the workers
_BROKEN: dict[tuple[str, str], str] = {}  # (kind, name) shipped here but unusable: why

#: what a run's setups carry: (kind, name) -> the cloudpickled class, or why it could not be sent
Shipped = dict[tuple[str, str], bytes | str]


def register_encoder(name: str, cls: Callable[..., Any]) -> None:
    """Make ``name`` usable as ``--encoder`` (and as a dict observation key's encoder), in this process and in
    the worker processes of the runs it starts.

    It is built as ``cls.from_spaces(spaces, **kw)`` when defined, else ``cls(spaces, **kw)``; the built module
    must take a (batch, *obs_shape) tensor and expose an integer ``out_dim``.
    """
    _register("encoder", name, cls)


def register_core(name: str, cls: Callable[..., Any]) -> None:
    """Make ``name`` usable as ``--rnn``, in this process and in the worker processes of the runs it starts.

    ``cls(in_dim, size, layers)`` builds a module called like ``torch.nn.GRU`` (time-major): ``(x [T, B, in_dim],
    h [layers, B, size]) -> (out [T, B, size], h_n [layers, B, size])``; with a class attribute ``state_parts = 2``
    the state is a pair, as ``torch.nn.LSTM``'s ``(h, c)``. daskrl keeps the state flat per env, resets it at
    episode starts and cuts sequences for truncated BPTT (``daskrl.models.recurrent.RecurrentCore``).
    """
    _register("core", name, cls)


def _register(kind: str, name: str, cls: Callable[..., Any]) -> None:
    label = _LABELS[kind]
    if not isinstance(name, str) or not name or name in _RESERVED[kind]:
        raise ValueError(f"register_{kind}: a {label} needs a name other than {', '.join(_RESERVED[kind])}, "
                         f"got {name!r}")
    if not callable(cls):
        raise ValueError(f"register_{kind}({name!r}, ...): expected a class or callable, got {type(cls).__name__}")
    _TABLES[kind][name] = cls
    _USER.add((kind, name))
    _BROKEN.pop((kind, name), None)


def register_builtin(kind: str, **components: Callable[..., Any]) -> None:
    """daskrl's own components: known in every process that imports daskrl, so they do not travel. Their names must
    be those :data:`BUILTIN` lists."""
    unlisted = set(components) - set(BUILTIN[kind][1])
    if unlisted:
        raise ValueError(f"built-in {_LABELS[kind]}s {sorted(unlisted)} are missing from registry.BUILTIN")
    _TABLES[kind].update(components)


def names(kind: str) -> list[str]:
    """The values ``--encoder`` (``kind='encoder'``) or ``--rnn`` (``'core'``) accept, sorted."""
    return sorted({*_TABLES[kind], *BUILTIN[kind][1], *_RESERVED[kind]})


def lookup(kind: str, name: str) -> Callable[..., Any]:
    """The class registered under ``name`` (a built-in one's module imported on first use); an unknown name raises
    ``ValueError`` with :func:`unknown_message`."""
    if name not in _TABLES[kind] and name in BUILTIN[kind][1]:
        importlib.import_module(BUILTIN[kind][0])
    try:
        return _TABLES[kind][name]
    except KeyError:
        raise ValueError(unknown_message(kind, name)) from None


def unknown_message(kind: str, name: str) -> str:
    """One line: the registered names, the nearest one, and how to register (or, in a worker, why a shipped
    registration could not be used)."""
    label = _LABELS[kind]
    if (kind, name) in _BROKEN:
        return f"{label} {name!r} was registered where the run started but cannot be used here: {_BROKEN[kind, name]}"
    close = difflib.get_close_matches(name, names(kind), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"Unknown {label} {name!r}{hint}: the registered {label}s are {', '.join(names(kind))}; add yours with "
            f"daskrl.models.register_{kind} in the script that trains (or evaluates), or in a module that --env-packages "
            "names")


def model_name_problems(encoder: str, rnn: str, key_encoders: dict | None = None) -> list[str]:
    """Config validation: one line per option that names no known component (``key_encoders``: the per-key encoder
    names of Dict observations, ``--key-encoders``)."""
    named = [("encoder", "encoder", encoder), ("rnn", "core", rnn)]
    named += [(f"key-encoders {key}:", "encoder", str(name)) for key, name in (key_encoders or {}).items()]
    return [f"--{flag} {name!r}: {unknown_message(kind, name)}" for flag, kind, name in named
            if name not in names(kind)]


def pack_components() -> Shipped:
    """The user's registrations, each pickled on its own, for a component setup (see the module docstring)."""
    shipped: Shipped = {}
    for kind, name in sorted(_USER):
        try:
            shipped[kind, name] = cloudpickle.dumps(_TABLES[kind][name])
        except Exception as exc:  # any pickling failure: the run fails only if it uses this one
            shipped[kind, name] = f"it could not be sent to the worker processes ({type(exc).__name__}: {exc})"
    return shipped


def install_components(shipped: Shipped) -> None:
    """Register what :func:`pack_components` sent, in the worker process that is about to build the model."""
    for (kind, name), blob in shipped.items():
        if (kind, name) in _USER:  # registered in this very process (a --serial run's threads): that one stays
            continue
        if isinstance(blob, str):
            _broken(kind, name, blob)
            continue
        try:
            _TABLES[kind][name] = cloudpickle.loads(blob)
        except Exception as exc:  # a class sent by reference whose module this process cannot import, say
            _broken(kind, name, f"it could not be loaded in this process ({type(exc).__name__}: {exc}); install its "
                                "module on every worker, or send it by value with "
                                "cloudpickle.register_pickle_by_value(module)")
            continue
        _BROKEN.pop((kind, name), None)


def _broken(kind: str, name: str, why: str) -> None:
    """A shipped registration this process cannot use: a lookup says why (not an older run's class by that name)."""
    _TABLES[kind].pop(name, None)
    _BROKEN[kind, name] = why
