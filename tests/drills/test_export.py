"""``daskrl export``: policies trained for real (tiny runs on one module cluster: an MLP on CartPole, a GRU on
CartPole, an LSTM on a Dict observation with an action mask) written to ONNX and TorchScript, whose files give the
trained model's deterministic actions and values on 1,000 observations recorded by playing the env (a recurrent
state carried step to step in both); the example plays the ONNX file without importing daskrl; and bad requests
are one readable line each."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import daskrl
from daskrl import train
from daskrl.cli import main
from daskrl.config import Config, ConfigError
from daskrl.envs import make_env
from daskrl.envs.layouts.dict_obs import pack_into
from daskrl.errors import ExportError
from daskrl.evaluation import load_policy
from daskrl.evaluation.export import check, export_policy, value_scale
from daskrl.evaluation.export_graph import PolicyGraph, graph_inputs

from ..helpers import SMALL_CARTPOLE, run_config, slow

ROOT = Path(__file__).resolve().parents[2]
CUE = "daskrl.testing.environments.envs:cue"
STEPS = 1000  # recorded observations per policy
#: the runs: options over SMALL_CARTPOLE, each a few thousand env steps (enough for non-trivial statistics)
RUNS = {"mlp": {},
        "gru": {"rnn": "gru", "rnn_size": 16},
        "dict": {"env": CUE, "env_kwargs": {"masked": True}, "rnn": "lstm", "rnn_size": 16, "rollout": 8,
                 "env_failure_limit": 0}}


def onnx_ready() -> None:
    for name in ("onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(name, reason=f"{name} is not installed (pip install 'daskrl[export]')")


@pytest.fixture(scope="module")
def trained(session, tmp_path_factory) -> dict[str, str]:
    """Each run's experiment directory, trained on the module's cluster."""
    tmp = tmp_path_factory.mktemp("export")
    dirs = {}
    for name, options in RUNS.items():
        summary = train(run_config(tmp, name, base=SMALL_CARTPOLE, train_for_env_steps=2_000, **options),
                        client=session.client)
        dirs[name] = summary["experiment_dir"]
    return dirs


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """``exported(run, format)`` -> the file, written on first use (an ONNX one skips where the export extra is
    missing); the MLP's ONNX file through the command line, the others through daskrl.export."""
    out, files = tmp_path_factory.mktemp("files"), {}

    def get(name: str, fmt: str) -> str:
        if fmt == "onnx":
            onnx_ready()
        if (name, fmt) in files:
            return files[name, fmt]
        path = str(out / f"{name}.{fmt}")
        if (name, fmt) == ("mlp", "onnx"):
            directory = Path(trained[name])
            assert main(["export", "--experiment", directory.name, "--train-dir", str(directory.parent),
                         "--output", path]) == 0
        else:
            assert daskrl.export(trained[name], fmt, output=path)["path"] == path
        files[name, fmt] = path
        return path

    return get


def runner(path: str, fmt: str):
    """The exported file as a function: inputs by name -> outputs by name (numpy), as its users would run it."""
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda feed: dict(zip(names, session.run(None, feed), strict=True))
    module = torch.export.load(path).module() if fmt == "pt2" else torch.jit.load(path)
    names = [o["name"] for o in load_description(path, fmt)["outputs"]]
    return lambda feed: dict(zip(names, (x.numpy() for x in module(*map(torch.from_numpy, feed.values()))),
                                 strict=True))


def record(directory: str) -> dict:
    """Play the trained model (deterministic) for STEPS steps, restarting ended episodes: the raw observations, the
    episode starts, and the model's actions and values in reward units (by the return statistics that travel with
    its weights, as ReturnNormalizer.denormalize takes them back) with its state carried from step to step."""
    config, model, _ = load_policy(directory)
    mean, var, count = model.return_stats.tolist()
    assert model.obs_count.item() > 0 and count > 0, "the statistics were never updated"
    std = math.sqrt(var + 1e-8)
    env = make_env(config.env.env, seed=3, env_kwargs=config.env.env_kwargs)
    keys, rows = model.spaces.obs_keys, []
    obs, _ = env.reset()
    rnn = np.zeros((1, model.state_size), np.float32) if model.recurrent else None
    start = True
    for _ in range(STEPS):
        packed = pack_into(np.zeros(model.spaces.obs_shape, np.uint8), obs, keys) if keys else obs
        if start and rnn is not None:
            rnn[:] = 0.0
        action, _, value = model.act(np.asarray(packed)[None], deterministic=True, state=rnn)
        rows.append({"obs": obs, "start": start, "action": action[0], "value": float(value[0]) * std + mean})
        obs, _, terminated, truncated, _ = env.step(action[0].item())
        start = terminated or truncated
        if start:
            obs, _ = env.reset()
    env.close()
    assert sum(r["start"] for r in rows) >= 2, "no episode start after the first: the state reset goes unseen"
    return {"rows": rows, "recurrent": model.recurrent, "size": model.state_size, "std": std}


def feed_of(obs, inputs: list[dict]) -> dict[str, np.ndarray]:
    """One observation as a batch of one per observation input, in the dtypes the file declares."""
    return {i["name"]: np.asarray(obs[i["name"]] if isinstance(obs, dict) else obs, dtype=i["dtype"])[None]
            for i in inputs if i["name"] != "rnn_state"}


@pytest.fixture(scope="module")
def recorded(trained) -> dict[str, dict]:
    return {name: record(directory) for name, directory in trained.items()}


@slow("three tiny training runs, nine exports (the ONNX exporter takes seconds)")
@pytest.mark.parametrize("fmt", ["onnx", "pt2", "torchscript"])
@pytest.mark.parametrize("name", list(RUNS))
def test_exported_policies_act_and_value_as_the_trained_model(trained, exported, recorded, name, fmt):
    path = exported(name, fmt)
    rec, run, inputs = recorded[name], runner(path, fmt), load_description(path, fmt)["inputs"]
    actions, values = [], []
    if rec["recurrent"]:  # step by step, the state carried in the file's own outputs and zeroed at episode starts
        state = np.zeros((1, rec["size"]), np.float32)
        for r in rec["rows"]:
            out = run({**feed_of(r["obs"], inputs), "rnn_state": np.zeros_like(state) if r["start"] else state})
            state = out["next_rnn_state"]
            actions.append(out["action"][0])
            values.append(out["value"][0])
    else:  # one batch of all the observations
        out = run({i["name"]: np.stack([np.asarray(r["obs"], i["dtype"]) for r in rec["rows"]]) for i in inputs})
        actions, values = list(out["action"]), list(out["value"])
        assert out["logits"].shape == (STEPS, 2)
    np.testing.assert_array_equal(np.array(actions), np.array([r["action"] for r in rec["rows"]]))
    # in the model's own (normalized) units: the file's tanh (aten::tanh) and the eager CPU model's (through sigmoid)
    # round differently by an ulp or so, which the return scale (std) multiplies in reward units
    np.testing.assert_allclose(values, [r["value"] for r in rec["rows"]], rtol=1e-5, atol=1e-5 * max(1.0, rec["std"]))
    assert np.std(values) > 0.01, "the values do not depend on the observations"


def load_description(path: str, fmt: str) -> dict:
    """The graph's description the file carries (an ONNX metadata property, a file in the TorchScript archive)."""
    if fmt == "onnx":
        import onnx

        return json.loads({p.key: p.value for p in onnx.load(path).metadata_props}["daskrl"])
    extra = {"daskrl.json": ""}
    if fmt == "pt2":
        torch.export.load(path, extra_files=extra)
    else:
        torch.jit.load(path, _extra_files=extra)
    return json.loads(extra["daskrl.json"])


@slow("plays the exported CartPole policy in a fresh interpreter (imports onnxruntime and gymnasium)")
def test_the_example_plays_the_onnx_file_without_daskrl(exported, trained):
    """Run in a fresh interpreter by a wrapper that fails if any daskrl module was imported by the end; its returns
    are those of the trained model playing the same seeds."""
    wrapper = ("import runpy, sys\n"
               f"sys.argv = ['onnx_play.py', {exported('gru', 'onnx')!r}, '--episodes', '2', '--seed', '7']\n"
               f"runpy.run_path({str(ROOT / 'examples' / 'onnx_play.py')!r}, run_name='__main__')\n"
               "leaked = sorted(m for m in sys.modules if m.split('.')[0] in ('daskrl', 'torch'))\n"
               "assert not leaked, f'imported {leaked[:5]}'\n")
    done = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, timeout=120, cwd="/")
    assert done.returncode == 0, done.stderr
    played = [float(line.split()[3]) for line in done.stdout.splitlines() if line.startswith("episode")]
    _, model, _ = load_policy(trained["gru"])
    env, expected = make_env("CartPole-v1"), []
    for k in range(2):
        obs, _ = env.reset(seed=7 + k)
        state, total, done_ = np.zeros((1, model.state_size), np.float32), 0.0, False
        while not done_:
            action = model.act(np.asarray(obs, np.float32)[None], True, state=state)[0][0]
            obs, reward, terminated, truncated, _ = env.step(action.item())
            total, done_ = total + reward, terminated or truncated
        expected.append(total)
    env.close()
    assert played == expected, done.stdout


@slow("uses the trained runs")
def test_the_check_after_writing_catches_a_file_that_computes_otherwise(trained, exported):
    """The export's own check passes the trained GRU's ONNX file against its policy, and refuses it, by output name,
    once one weight of the policy changed (so a mistranslating exporter would fail the export, not the world)."""
    path = exported("gru", "onnx")
    import onnxruntime

    config, model, _ = load_policy(trained["gru"])
    env = make_env("CartPole-v1")
    space = env.observation_space
    env.close()
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    graph = PolicyGraph(model, graph_inputs(model, space), value_scale(config, model))
    with torch.no_grad():
        check(graph, lambda feed: session.run(None, feed), graph.example(space, 5, seed=2))
        model.critic.bias += 1.0
        with pytest.raises(ExportError, match="'value' differs from the torch policy's"):
            check(graph, lambda feed: session.run(None, feed), graph.example(space, 5, seed=2))


@pytest.fixture(scope="module")
def untrained(tmp_path_factory) -> Path:
    """An experiment directory with a config and no checkpoint (a run that stopped before its first one)."""
    directory = tmp_path_factory.mktemp("untrained") / "fresh"
    directory.mkdir()
    (directory / "config.json").write_text(Config().replace(env="CartPole-v1", experiment="fresh").to_json())
    return directory


@pytest.mark.parametrize("args, message", [
    ([], "has no latest checkpoint yet"),
    (["--which", "best"], "has no best checkpoint yet"),
    (["--policy", "2"], "--policy 2: experiment .* trained 1 policy"),
    (["--format", "tflite"], "invalid choice: 'tflite'"),
    (["--experiment", "missing"], "not a daskrl experiment directory"),
])
def test_bad_requests_are_one_readable_line(untrained, capsys, args, message):
    base = ["export", "--experiment", "fresh", "--train-dir", str(untrained.parent), "--format", "torchscript"]
    try:
        status = main(base + args)
    except SystemExit as stop:  # argparse's own errors (an unknown choice) exit from the parser
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and re.search(message, err), err


def test_an_unknown_format_and_a_missing_onnx_package_name_the_fix(untrained, monkeypatch):
    with pytest.raises(ConfigError, match="format 'tflite' is unknown: use one of onnx, pt2, torchscript"):
        daskrl.export(str(untrained), "tflite")
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # what Python does when a package is not installed
    with pytest.raises(ConfigError, match=r"needs .*onnxscript.* not installed: pip install 'daskrl\[export\]'"):
        export_policy(str(untrained), "onnx")


class TwoButtons(gym.Env):
    """MultiDiscrete actions ([3, 2]) over a Box observation: the multi-discrete head's logits, one component after
    the other."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 2])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def saved_untrained(tmp_path: Path, env: str, **options) -> tuple[str, torch.nn.Module]:
    """An experiment directory with one checkpoint of a fresh model, given observation and return statistics far
    from the identity (so a graph that left them out would differ)."""
    from daskrl.envs import probe_env
    from daskrl.learning.checkpoints import CheckpointStore
    from daskrl.models.actor_critic import build_model

    config = Config().replace(env=env, experiment="fresh", train_dir=str(tmp_path), **options)
    model = build_model(probe_env(env), config.model, 0)
    model.set_obs_stats(np.full(model.obs_norm_shape, 0.3), np.full(model.obs_norm_shape, 4.0), 100.0)
    model.set_return_stats(-7.0, 9.0, 100.0)
    Path(config.experiment_dir).mkdir()
    Path(config.experiment_dir, "config.json").write_text(config.to_json())
    CheckpointStore(Path(config.experiment_dir) / "checkpoints").save({"model": model.state_dict(), "env_steps": 0}, 0)
    return config.experiment_dir, model.eval()


@slow("the ONNX exporter takes seconds")
@pytest.mark.parametrize("env, options, fmt, params", [
    ("Pendulum-v1", {"reward_scale": 0.5}, "onnx", ("mean", "log_std")),
    ("Pendulum-v1", {"action_bounds": "squash"}, "torchscript", ("mean", "log_std")),
    ("test-export/TwoButtons-v0", {}, "torchscript", ("logits",)),
    ("Pendulum-v1", {"action_bounds": "squash"}, "pt2", ("mean", "log_std")),
    ("test-export/TwoButtons-v0", {}, "pt2", ("logits",)),
])
def test_box_and_multi_discrete_actions_give_their_mode_and_distribution_parameters(tmp_path, env, options, fmt,
                                                                                     params):
    if fmt == "onnx":
        onnx_ready()
    daskrl.register_env("test-export/TwoButtons-v0", TwoButtons)
    directory, model = saved_untrained(tmp_path, env, **options)
    path = daskrl.export(directory, fmt)["path"]
    obs = np.random.default_rng(0).uniform(-1, 1, (64, *model.spaces.obs_shape)).astype(np.float32)
    out = runner(path, fmt)({"obs": obs})
    action, _, value = model.act(obs, deterministic=True)
    np.testing.assert_allclose(out["action"], action, rtol=1e-5, atol=1e-6)
    assert out["action"].dtype == action.dtype and out["action"].shape == (64, *model.spaces.action_shape)
    scale = options.get("reward_scale", 1.0)  # the learner's values are of scaled rewards: the file's of the env's
    np.testing.assert_allclose(out["value"], (value * 3.0 - 7.0) / scale, rtol=1e-5, atol=1e-5)  # std sqrt(9 + 1e-8)
    with torch.no_grad():
        dist, _ = model(torch.from_numpy(obs))
    expected = {"mean": dist.mean, "log_std": dist.log_std} if params == ("mean", "log_std") else \
        {"logits": torch.cat([d.logits for d in dist.dists], dim=-1)}
    assert tuple(k for k in out if k not in ("action", "value")) == params
    for name in params:
        np.testing.assert_allclose(out[name], expected[name].detach().numpy(), rtol=1e-5, atol=1e-6)
