"""Custom model components (``register_encoder``, ``register_core``) registered in the user's process reach the
worker processes that build the model: trained on a cluster of worker processes, checked in the workers' own
registries and in the weights; a custom core against a step-by-step loop; unknown and broken names in one line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
import torch
from torch import nn

from daskrl import train
from daskrl.config import Config, ConfigError, ModelConfig
from daskrl.driver.launch.preflight import check_components
from daskrl.envs import probe_env
from daskrl.evaluation import enjoy
from daskrl.evaluation.evaluator import Evaluator
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.models import MlpEncoder, register_core, register_encoder, registry
from daskrl.models.actor_critic import build_model, check_model
from daskrl.models.core_state import rnn_state_size
from daskrl.models.fast_path.numpy_policy import NumpyPolicy
from daskrl.models.registry import install_components, lookup, pack_components
from daskrl.runtime.actors.incidents import Incidents

from ..helpers import SMALL_CARTPOLE, run_config, slow

CARTPOLE = probe_env("CartPole-v1")
REPO = str(Path(__file__).resolve().parents[2])


class ResidualMlp(nn.Module):
    """A user's encoder: a linear stem and one residual block (parameter names no built-in encoder has)."""

    def __init__(self, obs_dim: int, width: int = 32) -> None:
        super().__init__()
        self.stem = nn.Linear(obs_dim, width)
        self.block = nn.Sequential(nn.Tanh(), nn.Linear(width, width))
        self.out_dim = width

    @classmethod
    def from_spaces(cls, spaces, **kwargs):
        return cls(spaces.obs_dim, **kwargs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.stem(obs.reshape(obs.shape[0], -1).float())
        return torch.tanh(x + self.block(x))


class LayerNormGru(nn.Module):
    """A user's GRU-like core: one GRU cell with its state layer-normalized, stepped in a loop (called like nn.GRU)."""

    def __init__(self, in_dim: int, size: int, layers: int) -> None:
        super().__init__()
        if layers != 1:
            raise ValueError("LayerNormGru has one layer")
        self.cell = nn.GRUCell(in_dim, size)
        self.norm = nn.LayerNorm(size)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, outs = h[0], []
        for t in range(x.shape[0]):
            h = self.norm(self.cell(x[t], h))
            outs.append(h)
        return torch.stack(outs), h.unsqueeze(0)


class PairStateCore(nn.Module):
    """A core whose state is a pair, as an LSTM's (h, c): ``state_parts = 2``."""

    state_parts = 2

    def __init__(self, in_dim: int, size: int, layers: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(in_dim, size, layers)

    def forward(self, x, hc):
        return self.lstm(x, hc)


class WrongShapes(nn.Module):
    """Answers with the input's width, not the core's size."""

    def __init__(self, in_dim: int, size: int, layers: int) -> None:
        super().__init__()

    def forward(self, x, h):
        return x, h


@pytest.fixture(autouse=True)
def restore_registry():
    """What a test registers is gone after it (the registry is this process's global state)."""
    saved = {kind: dict(table) for kind, table in registry._TABLES.items()}, set(registry._USER), dict(registry._BROKEN)
    yield
    for kind, table in registry._TABLES.items():
        table.clear()
        table.update(saved[0][kind])
    registry._USER.clear()
    registry._USER.update(saved[1])
    registry._BROKEN.clear()
    registry._BROKEN.update(saved[2])


def registered_in_worker(kind: str, name: str) -> bool:
    from daskrl.models import registry

    return name in registry._TABLES[kind]


# ---- in this process ----


def test_a_custom_core_steps_and_runs_sequences_like_a_loop():
    register_core("test_lngru", LayerNormGru)
    register_core("test_pair", PairStateCore)
    for name, parts in (("test_lngru", 1), ("test_pair", 2)):
        model_config = ModelConfig(rnn=name, rnn_size=8)
        model = build_model(CARTPOLE, model_config, 0)
        assert model.state_size == rnn_state_size(model_config, CARTPOLE) == parts * 8
        torch.manual_seed(1)
        obs = torch.randn(6, 3, 4)
        starts = torch.zeros(6, 3, dtype=torch.bool)
        starts[3, 1] = True
        state = torch.randn(3, model.state_size)
        with torch.no_grad():
            out, before = model.core.sequence(model.encoder(obs.reshape(18, 4)).reshape(6, 3, -1), state, starts)
            loop_state, loop_out = state, []
            for t in range(6):
                loop_state = loop_state * (1.0 - starts[t].float()).unsqueeze(-1)
                step_out, loop_state = model.core.step(model.encoder(obs[t]), loop_state)
                loop_out.append(step_out)
        assert torch.allclose(out, torch.stack(loop_out), atol=1e-5)
        assert torch.allclose(before[6], loop_state, atol=1e-5)
        # the reset matters: without it the outputs after step 3 differ
        with torch.no_grad():
            unreset, _ = model.core.sequence(model.encoder(obs.reshape(18, 4)).reshape(6, 3, -1), state, None)
        assert not torch.allclose(unreset[3:, 1], out[3:, 1], atol=1e-4)
    assert isinstance(build_model(CARTPOLE, ModelConfig(rnn="test_lngru", rnn_size=8), 0).core.rnn.norm,
                      nn.LayerNorm)


def test_unknown_and_unusable_components_are_one_line_each():
    register_encoder("test_resmlp", ResidualMlp)
    with pytest.raises(ConfigError) as info:
        check_components(Config.from_flat({"encoder": "test_resmlpp", "rnn": "lstmm"}))
    encoder_line, rnn_line = info.value.problems
    assert encoder_line.startswith("--encoder 'test_resmlpp': Unknown encoder 'test_resmlpp' (did you mean "
                                   "'test_resmlp'?): the registered encoders are auto, cnn, impala, mlp,")
    assert "test_resmlp" in encoder_line.split("registered encoders are")[1] and "\n" not in encoder_line
    assert "daskrl.models.register_encoder" in encoder_line
    assert rnn_line.startswith("--rnn 'lstmm': Unknown recurrent core 'lstmm' (did you mean 'lstm'?): the "
                               "registered recurrent cores are gru, lstm, none")
    assert "daskrl.models.register_core" in rnn_line
    check_components(Config.from_flat({"encoder": "test_resmlp", "rnn": "gru"}))
    with pytest.raises(ValueError, match="^Unknown recurrent core 'nope'"):
        build_model(CARTPOLE, ModelConfig(rnn="nope"), 0)
    with pytest.raises(ValueError, match="register_core: a recurrent core needs a name other than none"):
        register_core("none", LayerNormGru)
    # a core that answers in other shapes is refused in the driver, in one line
    register_core("test_wrong", WrongShapes)
    with pytest.raises(ConfigError) as info:
        check_model(Config.from_flat({"rnn": "test_wrong", "rnn_size": 8}), CARTPOLE)
    assert len(info.value.problems) == 1 and "returned shapes [(2, 3, 64)" in info.value.problems[0]
    assert "called like torch.nn.GRU" in info.value.problems[0]


def test_a_shipped_component_that_cannot_be_used_here_says_why():
    register_encoder("test_stale", ResidualMlp)
    shipped = pack_components()
    registry._USER.clear()  # from here on this process is a worker: what it has came from install_components
    registry._ENCODERS.pop("test_stale")
    install_components(shipped)  # an earlier run's: its class must not be used instead of a broken one
    assert lookup("encoder", "test_stale") is ResidualMlp
    gone = types.ModuleType("daskrl_test_gone_module")
    exec("class Gone:\n    pass", gone.__dict__)
    gone.Gone.__module__ = gone.__name__
    gone.__file__ = "/nonexistent/daskrl_test_gone_module.py"  # a module on disk here, so sent by reference
    sys.modules[gone.__name__] = gone
    try:
        by_reference = cloudpickle.dumps(gone.Gone)
    finally:
        del sys.modules[gone.__name__]
    install_components({("encoder", "test_stale"): by_reference,
                        ("core", "test_unsent"): "it could not be sent to the worker processes (PicklingError: x)"})
    with pytest.raises(ValueError, match=r"^encoder 'test_stale' was registered where the run started but cannot be "
                                         r"used here: it could not be loaded in this process \(ModuleNotFoundError"):
        lookup("encoder", "test_stale")
    with pytest.raises(ValueError, match="register_pickle_by_value"):
        build_model(CARTPOLE, ModelConfig(encoder="test_stale"), 0)
    with pytest.raises(ValueError, match=r"core 'test_unsent' .* could not be sent .*PicklingError"):
        build_model(CARTPOLE, ModelConfig(rnn="test_unsent"), 0)
    register_encoder("test_stale", ResidualMlp)  # registered again here: usable again
    assert lookup("encoder", "test_stale") is ResidualMlp
    # in the process that registered it (a --serial run's components are threads there) its own class stays, even
    # one that could not be sent
    install_components({("encoder", "test_stale"): "it could not be sent to the worker processes (x)"})
    assert lookup("encoder", "test_stale") is ResidualMlp


@slow("a script's run in its own process")
def test_a_class_defined_in_a_script_travels_by_value(tmp_path):
    """What a user's script does: a class in ``__main__`` registered there, shipped, and built in a process that
    never saw its source."""
    blob = tmp_path / "components.pkl"
    script = textwrap.dedent(f"""
        import pickle
        from torch import nn
        from daskrl.models import register_encoder, register_core
        from daskrl.models.registry import pack_components

        class ScriptEncoder(nn.Module):
            def __init__(self, spaces):
                super().__init__()
                self.only_in_the_script = nn.Linear(spaces.obs_dim, 5)
                self.out_dim = 5

            def forward(self, obs):
                return self.only_in_the_script(obs.float())

        class ScriptCore(nn.GRU):
            pass

        register_encoder("script_encoder", ScriptEncoder)
        register_core("script_core", ScriptCore)
        with open({str(blob)!r}, "wb") as f:
            pickle.dump(pack_components(), f)
    """)
    elsewhere = textwrap.dedent(f"""
        import pickle
        from daskrl.config import ModelConfig
        from daskrl.envs import probe_env
        from daskrl.models.actor_critic import build_model
        from daskrl.models.registry import install_components

        with open({str(blob)!r}, "rb") as f:
            install_components(pickle.load(f))
        model = build_model(probe_env("CartPole-v1"), ModelConfig(encoder="script_encoder", rnn="script_core"), 0)
        print(type(model.core.rnn).__name__, sorted(model.state_dict()))
    """)
    env = {**os.environ, "PYTHONPATH": REPO}
    for code in (script, elsewhere):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ScriptCore ")
    assert "'encoder.only_in_the_script.weight'" in done.stdout and "'core.rnn.weight_hh_l0'" in done.stdout


def test_the_numpy_fast_path_leaves_a_registered_mlp_subclass_to_torch():
    class DoubledMlp(MlpEncoder):
        def forward(self, obs):
            return 2 * super().forward(obs)

    register_encoder("test_doubled", DoubledMlp)
    assert not NumpyPolicy.supports(build_model(CARTPOLE, ModelConfig(encoder="test_doubled"), 0))
    assert NumpyPolicy.supports(build_model(CARTPOLE, ModelConfig(), 0))


# ---- on a cluster of worker processes ----


#: a short CartPole run (4k env steps) on one rollout worker
SHORT_RUN = {**SMALL_CARTPOLE, "train_for_env_steps": 4_000, "train_for_seconds": 90.0}


def test_an_encoder_registered_here_trains_in_worker_processes(cluster, tmp_path):
    assert os.getpid() not in set(cluster.client.run(os.getpid).values())  # the model is built elsewhere
    assert not any(cluster.client.run(registered_in_worker, "encoder", "test_resmlp").values())
    register_encoder("test_resmlp", ResidualMlp)
    config = run_config(tmp_path, "resmlp", base=SHORT_RUN, encoder="test_resmlp", eval_episodes=2)
    summary = train(config, client=cluster.client)
    assert summary["env_steps"] >= 4_000 and summary["episodes"] > 0
    assert summary["policy_version"] > 1 and not summary["incidents"], summary["incidents"]
    # the learner and the rollout worker (acting inline) installed it in their own processes
    assert sum(cluster.client.run(registered_in_worker, "encoder", "test_resmlp").values()) >= 2
    saved = CheckpointStore(f"{summary['experiment_dir']}/checkpoints").load("latest")["model"]
    assert {"encoder.stem.weight", "encoder.block.1.weight", "value_encoder.stem.weight"} <= set(saved)
    # the evaluator (threads of this process, here called directly: a run this short may end before its result is
    # logged) and enjoy build it with the trained weights too
    evaluator = Evaluator(config, CARTPOLE, 0, Incidents(logging.getLogger(__name__)), warn=print)
    evaluator._run(evaluator.tasks[0], saved, 4_000, 0)
    assert evaluator._result["eval_episodes"] == 2 and isinstance(evaluator.tasks[0].model.encoder, ResidualMlp)
    evaluator.close()
    assert len(enjoy(summary["experiment_dir"], episodes=2)["returns"]) == 2
    # `daskrl enjoy` in a process of its own, where nothing registered it: one line that says where to register it
    done = subprocess.run([sys.executable, "-m", "daskrl", "enjoy", "--experiment", "resmlp", "--train-dir",
                           str(tmp_path), "--episodes", "1"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("daskrl: error: invalid configuration: --encoder 'test_resmlp': Unknown encoder")
    assert "--env-packages" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_core_registered_here_trains_with_remote_inference(cluster, tmp_path):
    register_core("test_lngru", LayerNormGru)
    summary = train(run_config(tmp_path, "lngru", base=SHORT_RUN, rnn="test_lngru", rnn_size=16, recurrence=8,
                               inference="remote"), client=cluster.client)
    assert summary["env_steps"] >= 4_000 and summary["episodes"] > 0
    assert summary["policy_version"] > 1 and not summary["incidents"], summary["incidents"]
    # the learner and the inference worker installed it (the rollout worker keeps the states, without the model)
    assert sum(cluster.client.run(registered_in_worker, "core", "test_lngru").values()) >= 2
    saved = CheckpointStore(f"{summary['experiment_dir']}/checkpoints").load("latest")["model"]
    assert {"core.rnn.cell.weight_ih", "core.rnn.norm.weight"} <= set(saved)
    untrained = run_config(tmp_path, base=SHORT_RUN, rnn="test_lngru", rnn_size=16)
    initial = build_model(CARTPOLE, untrained.model, 0).state_dict()
    assert float((saved["core.rnn.cell.weight_hh"] - initial["core.rnn.cell.weight_hh"]).abs().max()) > 1e-4
    assert np.isfinite(saved["core.rnn.norm.weight"].numpy()).all()


def test_what_travels_is_every_registration_each_on_its_own():
    register_encoder("test_resmlp", ResidualMlp)
    register_encoder("test_local", type("Local", (ResidualMlp,), {"lock": threading.Lock()}))
    shipped = pack_components()
    assert isinstance(shipped["encoder", "test_resmlp"], bytes)
    assert shipped["encoder", "test_local"].startswith("it could not be sent to the worker processes (TypeError")
    assert not any(kind == "encoder" and name in ("mlp", "cnn") for kind, name in shipped)  # built-ins stay


def test_a_serial_run_uses_the_class_registered_here_even_one_that_cannot_be_sent(tmp_path):
    """With --serial the components are threads of this process: the registration made here is the one they build,
    and a class that could not be pickled for worker processes does not matter."""
    built = []

    class Unsendable(ResidualMlp):
        lock = threading.Lock()  # cannot be pickled: the class could never reach a worker process

        def __init__(self, obs_dim: int) -> None:
            super().__init__(obs_dim)
            built.append(threading.current_thread().name)

    register_encoder("test_unsendable", Unsendable)
    assert isinstance(pack_components()["encoder", "test_unsendable"], str)
    summary = train(run_config(tmp_path, "serial", base=SHORT_RUN, encoder="test_unsendable", serial=True,
                               train_for_env_steps=2_000))
    assert summary["env_steps"] >= 2_000 and summary["episodes"] > 0 and not summary["incidents"]
    assert len(built) >= 6  # the driver's check, then learner and sampler: policy and value encoders each
