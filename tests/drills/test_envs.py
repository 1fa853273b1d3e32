"""The extras families' envs (MuJoCo's HalfCheetah and Hopper, Box2D's LunarLander, each when installed) train end to
end with their family's defaults through daskrl.train on its embedded cluster: the run reaches its 10,000 env steps,
prints the family's defaults and writes checkpoints."""

from __future__ import annotations

import pytest

from ..helpers import slow


@pytest.mark.parametrize("env, module, extra", [("HalfCheetah-v5", "mujoco", "mujoco"),
                                                ("Hopper-v5", "mujoco", "mujoco"),
                                                ("LunarLander-v3", "Box2D", "box2d")])
@slow("a training run per extras family")
def test_an_extras_env_trains_end_to_end_with_its_familys_defaults(tmp_path, capsys, env, module, extra):
    """The family's settings (synchronous, long rollouts, continuous actions) make a run that ends and checkpoints."""
    pytest.importorskip(module, reason=f"{module} is not installed (pip install 'daskrl[{extra}]')")
    from daskrl import train
    from daskrl.config import Config
    from daskrl.config.env_defaults import family_of

    summary = train(Config().replace(env=env, train_dir=str(tmp_path), dashboard_address="", experiment="extra",
                                     train_for_env_steps=10_000, report_interval=1.0))
    assert summary["stop_reason"].startswith("reached") and summary["env_steps"] >= 10_000, summary
    assert summary["policy_version"] >= 1 and not any(summary["incidents"].values()), summary["incidents"]
    assert f"defaults for {family_of(env).name} envs" in capsys.readouterr().out
    assert list((tmp_path / "extra" / "checkpoints").glob("*.pt"))
