"""``daskrl export``: write a trained policy's forward pass to an ONNX, torch.export or TorchScript file, for use
without daskrl.

The graph (daskrl/evaluation/export_graph.py) takes the env's observations and gives the deterministic action, the
value, the distribution's parameters and a recurrent policy's next state; docs/export.md says what each is.

ONNX goes through ``torch.onnx.export(..., dynamo=True)``: in torch 2.13 it is the default and the maintained
exporter (torch.export's graph, translated by onnxscript), while the TorchScript-based one warns that it will be
removed. It costs a couple of seconds per export, once. ``pt2`` is torch.export's own program (``torch.export.save``),
the format PyTorch names in place of TorchScript, with the batch dimension left dynamic; it needs torch only.
Whatever the exporter, the file written is read back (by onnxruntime, ``torch.export.load`` or ``torch.jit.load``) and
run on observations drawn from the env's space at another batch size than the one traced, and compared with the
torch graph: a mistranslated operator or a batch size baked into the graph is an error here, not wrong actions in
the world.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from daskrl.algo.common.normalizers import ReturnNormalizer
from daskrl.config import Config, ConfigError
from daskrl.envs import make_env
from daskrl.envs.layouts.agent_spaces import is_multi_agent
from daskrl.errors import ExportError, one_line
from daskrl.evaluation.episodes import load_policy, training_done
from daskrl.evaluation.export_graph import PolicyGraph, graph_inputs
from daskrl.models.actor_critic import ActorCritic
from daskrl.sampling.policies.policy_map import mapping_of, resolve_mapping
from daskrl.sampling.policies.policy_spaces import CHECKED_EPISODES

#: the formats, and the file suffix of each
FORMATS = {"onnx": ".onnx", "pt2": ".pt2", "torchscript": ".pt"}
CHECKPOINTS = ("latest", "best")
#: what installs the ONNX exporter and runtime
EXTRA = "pip install 'daskrl[export]'"
#: how far the file's outputs may be from the torch graph's on the check's observations
TOLERANCE = 1e-4
#: where a metadata entry describes the graph: an ONNX model property, a file inside a TorchScript archive
METADATA_KEY = "daskrl"

#: a function that runs an exported file: inputs by name (numpy) -> outputs in order (numpy)
Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def export_policy(experiment_dir: str, format: str = "onnx", policy: int = 0, which: str = "latest",
                  output: str | None = None) -> dict[str, Any]:
    """Write policy ``policy`` of the experiment in ``experiment_dir`` (its ``which`` checkpoint: 'latest' or 'best')
    as ``format`` ('onnx', 'pt2' or 'torchscript') to ``output`` (default: ``<experiment>/export/policy_<K>_<which>`` with
    the format's suffix), check it, and return its description (path, inputs, outputs, what it was trained for)."""
    if format not in FORMATS:
        raise ConfigError([f"export format {format!r} is unknown: use one of {', '.join(FORMATS)}"])
    if which not in CHECKPOINTS:
        raise ConfigError([f"checkpoint {which!r}: export takes the 'latest' or the 'best' one"])
    write, load = _WRITERS[format]
    if format == "onnx":
        require_onnx()  # before the checkpoint and the env are loaded: the missing package is the one problem
    config, model, state = load_policy(experiment_dir, which, policy)
    space, agents = _observation_space(config, policy)
    graph = PolicyGraph(model, graph_inputs(model, space), value_scale(config, model))
    path = output or os.path.join(experiment_dir, "export", f"policy_{policy}_{which}{FORMATS[format]}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    description = {"format": format, "env": config.env.env, "env_kwargs": config.env.env_kwargs,
                   "experiment": os.path.basename(os.path.normpath(experiment_dir)), "policy": policy,
                   "checkpoint": which, **training_done(config, state),
                   "state_size": model.state_size, "action_kind": model.spaces.action_kind,
                   "inputs": [t.describe() for t in graph.inputs], "outputs": [t.describe() for t in graph.outputs]}
    if agents:  # a multi-agent experiment: a file per policy, and who plays which
        description.update(agents=agents, policy_mapping=mapping_of(config.policies),
                           num_policies=config.policies.num_policies)
    with torch.no_grad():
        write(graph, graph.example(space, 2, seed=0), path, json.dumps(description))
        check(graph, load(path), graph.example(space, 3, seed=1))
    return {**description, "path": path}


def require_onnx(what: str = "--format onnx", install: str = f"{EXTRA} (or --format pt2, which needs torch only)"
                 ) -> None:
    """onnx, onnxscript (the exporter) and onnxruntime (the check) must import, or one line says what to install
    (``what`` needs them; ``install``: how to get them)."""
    missing = []
    for name in ("onnx", "onnxscript", "onnxruntime"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ConfigError([f"{what} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                           f"not installed: {install}"])


def value_scale(config: Config, model: ActorCritic) -> tuple[float, float]:
    """(mean, std) that take the value head's output to the env's reward units: the learner's return statistics,
    which travel with the weights, where it normalized its targets (``--normalize-returns``), and ``--reward-scale``
    undone (the learner trained on scaled rewards; a ``--reward-clip`` cannot be undone)."""
    mean, std = 0.0, 1.0
    if config.learner.normalize_returns:
        returns = ReturnNormalizer()
        stats_mean, var, count = model.return_stats.tolist()
        returns.load_state_dict({"shape": [], "mean": stats_mean, "var": var, "count": count})
        mean, std = float(returns.stats.mean), float(returns.stats.std)
    scale = float(config.learner.reward_scale)
    return mean / scale, std / scale


def _observation_space(config: Config, policy: int) -> tuple[Any, list[str]]:
    """The observation space policy ``policy`` acts on, as the env gives it (a Dict's key dtypes are the graph's
    input dtypes), and a multi-agent env's agent ids ([] for a single-agent env): there the space is that of an agent
    the policy plays (a PettingZoo env's ``observation_space`` is a method of the agent)."""
    env = make_env(config.env.env, env_kwargs=config.env.env_kwargs)
    try:
        if not is_multi_agent(env):
            return env.observation_space, []
        agents = [str(a) for a in env.possible_agents]
        return env.observation_space(env.possible_agents[_agent_of(config, agents, policy)]), agents
    finally:
        env.close()


def _agent_of(config: Config, agents: list[str], policy: int) -> int:
    """The position of an agent policy ``policy`` plays: any, under a built-in mapping (its policies' agents share
    their spaces); the first a custom mapping gives it in the episodes it is checked on."""
    p = config.policies
    _, mapping = resolve_mapping(mapping_of(p), p.num_policies, p.self_play_snapshots)
    if mapping is None:
        return 0
    for episode in range(CHECKED_EPISODES):
        for position, agent in enumerate(agents):
            if mapping(agent, episode) == policy:
                return position
    raise ExportError(f"--policy-mapping {p.policy_mapping!r} gives policy {policy} no agent in episodes "
                      f"0..{CHECKED_EPISODES - 1}: export a policy that plays")


def check(graph: PolicyGraph, run: Runner, example: tuple[torch.Tensor, ...]) -> None:
    """The file's outputs against the torch graph's on ``example``; float outputs within :data:`TOLERANCE` (the
    actions follow from the distribution's parameters, which are compared: a near tie may pick another one)."""
    feed = {t.name: x.numpy() for t, x in zip(graph.inputs, example, strict=True)}
    expected = [x.numpy() for x in graph(*example)]
    got = run(feed)
    for spec, want, have in zip(graph.outputs, expected, got, strict=True):
        if tuple(have.shape) != tuple(want.shape):
            raise ExportError(f"the exported graph's {spec.name!r} came out shaped {tuple(have.shape)} for a batch of "
                              f"{len(want)}, not {tuple(want.shape)}: the batch size was baked into the graph")
        if want.dtype.kind != "f":
            continue
        floor = np.finfo(np.float32).min / 2  # a masked action's log-probability: -3.4e38, or -inf once exported
        want, have = np.maximum(want, floor), np.maximum(have, floor)
        if not np.allclose(have, want, rtol=TOLERANCE, atol=TOLERANCE):
            gap = float(np.max(np.abs(have.astype(np.float64) - want)))
            raise ExportError(f"the exported graph's {spec.name!r} differs from the torch policy's by {gap:.3g} "
                              "(the exporter mistranslated an operator): try the other --format")


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The ONNX exporter prints its progress and logs a warning for each optional package it lacks: keep the
    command's output to its own lines (its failures still raise)."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _write_onnx(graph: PolicyGraph, example: tuple[torch.Tensor, ...], path: str, description: str) -> None:
    batch = torch.export.Dim("batch")
    try:
        with _quiet_exporter():
            program = torch.onnx.export(graph, example, dynamo=True, external_data=False,
                                        dynamic_shapes=(tuple({0: batch} for _ in example),))
    except Exception as exc:  # whatever torch.export or onnxscript raise on an operator they cannot translate
        raise ExportError(f"the ONNX exporter failed on this policy ({_first_line(exc)}); --format torchscript may "
                          "work") from exc
    model = program.model
    _name_values(model.graph, model.graph.inputs, [t.name for t in graph.inputs])
    _name_values(model.graph, model.graph.outputs, [t.name for t in graph.outputs])
    model.metadata_props[METADATA_KEY] = description
    program.save(path, external_data=False)


def _name_values(onnx_graph: Any, values: Any, names: list[str]) -> None:
    """Name the graph's inputs or outputs. Not the exporter's ``input_names``: it names its nodes' results after
    their operators, and an input named as one of them (a Dict key ``view``, an output ``mean``) made a graph that
    onnxruntime refused (a duplicate name); so a value that holds a wanted name gives it up here first."""
    from onnx_ir.traversal import RecursiveGraphIterator

    taken = {v.name: v for node in RecursiveGraphIterator(onnx_graph) for v in node.outputs}
    taken.update({v.name: v for v in onnx_graph.inputs})
    for value, name in zip(values, names, strict=True):
        holder = taken.get(name)
        if holder is not None and holder is not value:
            holder.name = next(f"{name}_{k}" for k in itertools.count(1) if f"{name}_{k}" not in taken)
            taken[holder.name] = holder
        value.name = name
        taken[name] = value


def _first_line(exc: BaseException) -> str:
    """An exporter's error without its advice to file a bug report: the type and the first line of the message."""
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]


def _load_onnx(path: str) -> Runner:
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return lambda feed: session.run(None, feed)


def _write_pt2(graph: PolicyGraph, example: tuple[torch.Tensor, ...], path: str, description: str) -> None:
    """torch.export's program with the batch dimension of every input dynamic (a recurrent state's too), and the
    description as an extra file of the archive."""
    batch = torch.export.Dim("batch")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # forward(*inputs): the inputs are one tuple argument, so its shapes are one tuple too
            program = torch.export.export(graph, example, dynamic_shapes=(tuple({0: batch} for _ in example),))
    except Exception as exc:
        raise ExportError(f"torch.export failed on this policy ({_first_line(exc)}); --format torchscript may "
                          "work") from exc
    torch.export.save(program, path, extra_files={f"{METADATA_KEY}.json": description})


def _load_pt2(path: str) -> Runner:
    module = torch.export.load(path).module()
    return lambda feed: [x.numpy() for x in module(*(torch.from_numpy(v) for v in feed.values()))]


def _write_torchscript(graph: PolicyGraph, example: tuple[torch.Tensor, ...], path: str, description: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on Python values; the check catches what matters
            traced = torch.jit.trace(graph, example, check_trace=False)
    except Exception as exc:
        raise ExportError(f"tracing this policy for TorchScript failed ({one_line(exc)}); --format onnx may "
                          "work") from exc
    torch.jit.save(traced, path, _extra_files={f"{METADATA_KEY}.json": description})


def _load_torchscript(path: str) -> Runner:
    module = torch.jit.load(path)
    return lambda feed: [x.numpy() for x in module(*(torch.from_numpy(v) for v in feed.values()))]


_WRITERS: dict[str, tuple[Callable[..., None], Callable[[str], Runner]]] = {
    "onnx": (_write_onnx, _load_onnx), "pt2": (_write_pt2, _load_pt2),
    "torchscript": (_write_torchscript, _load_torchscript)}
