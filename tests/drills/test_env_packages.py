"""``--env-packages``: modules imported before an env id is resolved, in the driver (preflight: never in
``Config.validate()``, which imports no user code), in the
rollout workers' own processes and in ``daskrl enjoy``; gymnasium's ``module:EnvId`` form; one-line refusals; the
unknown-id hint; minigrid's ids (a probe only: its observations are dicts)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from daskrl import train
from daskrl.cli import _config_from_args, build_parser, main
from daskrl.config import Config, ConfigError
from daskrl.driver.launch.preflight import check_components
from daskrl.envs import make_env, probe_env
from daskrl.envs import registry as env_registry
from daskrl.envs.packages import package_names
from daskrl.errors import EnvError
from daskrl.models import registry
from daskrl.runtime import connect_cluster
from daskrl.runtime.memory.shm import list_segments

PKG_DIR = Path(__file__).resolve().parents[1] / "envpkg"
PKG = "daskrl_test_envpkg"  # importing it registers ENV_ID, as `import minigrid` registers MiniGrid-*
ENV_ID = "DaskrlPkgCartPole-v0"
REPO = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def package(monkeypatch):
    """The test package importable, as an installed one is, but not imported yet: its id is unknown."""
    monkeypatch.syspath_prepend(str(PKG_DIR))

    def forget():
        sys.modules.pop(PKG, None)
        gym.registry.pop(ENV_ID, None)
        env_registry._PROBED.clear()

    forget()
    yield
    forget()


def imported_here(name: str) -> bool:
    return name in sys.modules


def importable_here(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def test_an_unknown_plain_id_names_both_ways_to_import_its_package(package):
    with pytest.raises(EnvError) as info:
        make_env(ENV_ID)
    message = str(info.value)
    assert message.startswith(f"Unknown environment {ENV_ID!r}") and "\n" not in message
    assert f"'package:{ENV_ID}' (gymnasium's form) or --env-packages package" in message


def test_gymnasiums_module_colon_id_form_imports_the_package(package):
    env = make_env(f"{PKG}:{ENV_ID}", seed=0)
    assert env.spec.id == ENV_ID and env.spec.max_episode_steps == 200
    env.close()
    assert imported_here(PKG)


def test_preflight_imports_them_so_the_plain_id_resolves_and_validation_does_not(package):
    config = Config.from_flat({"env": ENV_ID, "env_packages": [PKG]})
    config.validate()
    assert not imported_here(PKG)  # a validator checks values; it runs no user code
    check_components(config)
    assert imported_here(PKG) and probe_env(ENV_ID).obs_shape == (4,)


def test_modules_that_cannot_be_imported_are_one_line_each(package):
    with pytest.raises(ConfigError) as info:
        check_components(Config.from_flat({"env_packages": ["daskrl_no_such_pkg.envs,daskrl_test_envpkg_broken", PKG,
                                                             "not a module"]}))
    assert info.value.problems == [
        "--env-packages: cannot import 'daskrl_no_such_pkg.envs': no module named 'daskrl_no_such_pkg' "
        "(pip install daskrl_no_such_pkg)",
        "--env-packages: importing 'daskrl_test_envpkg_broken' failed: it needs 'daskrl_test_missing_dependency', "
        "which is not installed (pip install daskrl_test_missing_dependency)",
        "--env-packages 'not a module' is not a module name (such as minigrid or my_pkg.envs)",
    ]
    assert imported_here(PKG)  # the one that imports was imported all the same


def test_a_module_they_name_may_register_model_components(package):
    """Imported before --encoder and --rnn are looked up: what `daskrl enjoy` needs for a model registered in a
    module rather than in the training script."""
    sys.modules.pop("daskrl_test_modelpkg", None)
    registry._ENCODERS.pop("test_packaged", None)
    registry._USER.discard(("encoder", "test_packaged"))
    with pytest.raises(ConfigError, match="--encoder 'test_packaged': Unknown encoder"):
        check_components(Config.from_flat({"encoder": "test_packaged"}))
    check_components(Config.from_flat({"encoder": "test_packaged", "env_packages": ["daskrl_test_modelpkg"]}))


def test_the_flag_takes_names_and_comma_separated_lists(capsys):
    args = build_parser().parse_args(["train", "--env-packages", "minigrid,procgen", "my_pkg.envs"])
    assert package_names(_config_from_args(args).env.env_packages) == ["minigrid", "procgen", "my_pkg.envs"]
    assert main(["train", "--env", "CartPole-v1", "--env-packages", "daskrl_no_such_pkg"]) == 2
    assert capsys.readouterr().err == ("daskrl: error: invalid configuration: --env-packages: cannot import "
                                       "'daskrl_no_such_pkg': no module named 'daskrl_no_such_pkg' "
                                       "(pip install daskrl_no_such_pkg)\n")


def test_a_run_imports_them_in_its_worker_processes_and_enjoy_does_too(package, tmp_path):
    with connect_cluster(n_workers=2, dashboard_address=None) as session:  # started after sys.path changed
        client, run_id = session.client, session.run_id
        assert all(client.run(importable_here, PKG).values()), "workers do not inherit the driver's sys.path"
        assert not any(client.run(imported_here, PKG).values())
        config = Config.from_flat({"env": ENV_ID, "env_packages": [PKG], "train_dir": str(tmp_path),
                                   "experiment": "pkg", "num_workers": 1, "num_envs_per_worker": 8, "rollout": 16,
                                   "batch_size": 128, "num_batches_per_epoch": 2, "train_for_env_steps": 3_000,
                                   "train_for_seconds": 90.0, "report_interval": 0.5, "dashboard_address": ""})
        summary = train(config, client=client)
        assert summary["env_steps"] >= 3_000 and summary["episodes"] > 0 and not summary["incidents"]
        assert any(client.run(imported_here, PKG).values())  # the rollout worker made its envs from the plain id
    assert list_segments(run_id) == []
    # `daskrl enjoy` in a process of its own, where the package is importable and nothing imports it but the config
    done = subprocess.run([sys.executable, "-m", "daskrl", "enjoy", "--experiment", "pkg", "--train-dir",
                           str(tmp_path), "--episodes", "2"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([REPO, str(PKG_DIR)])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("daskrl enjoy: 2 episodes, return ")


@pytest.mark.skipif(importlib.util.find_spec("minigrid") is None,
                    reason="minigrid is not installed (pip install 'daskrl[minigrid]')")
def test_minigrid_ids_resolve_through_env_packages_and_the_module_form():
    """A probe only: minigrid's observations are dicts. In a process of its own, where minigrid was never imported."""
    code = textwrap.dedent("""
        import gymnasium as gym
        from daskrl.envs import make_env
        from daskrl.envs.packages import import_env_packages
        from daskrl.errors import EnvError

        try:
            make_env("MiniGrid-Empty-5x5-v0")
        except EnvError as exc:
            print("unknown before:", "--env-packages package" in str(exc))
        env = make_env("minigrid:MiniGrid-DoorKey-5x5-v0")
        print("module form:", env.spec.id, type(env.observation_space).__name__)
        import_env_packages(["minigrid"])
        env = make_env("MiniGrid-Empty-5x5-v0", seed=0)
        print("plain id:", env.spec.id, sorted(env.observation_space.spaces))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["unknown before: True", "module form: MiniGrid-DoorKey-5x5-v0 Dict",
                                        "plain id: MiniGrid-Empty-5x5-v0 ['direction', 'image', 'mission']"]
