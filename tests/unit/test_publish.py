"""``daskrl publish``'s parts that need no trained run: the model card read back by ``huggingface_hub``, the IQM and
interval over seeds and the seed a bundle carries, the output folder's rules, what ``enjoy --from`` and
``--init-checkpoint`` accept as a bundle, a sweep with nothing to publish, and bad input refused in one line before
anything is written (tests/drills/test_publish.py publishes trained runs)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from daskrl.cli import main
from daskrl.config import Config
from daskrl.errors import ConfigError
from daskrl.learning.checkpoints import CheckpointStore, checkpoint_file
from daskrl.publish.bundle import MANIFEST, bundle_dir, check_output
from daskrl.publish.scores import AcrossSeeds, Evaluation, SeedResult, across_seeds, representative
from daskrl.publish.sweeps import choose
from daskrl.sweep.spec import spec_from_dict
from daskrl.sweep.trials import Trial, write_table


def seed_result(run_seed: int, mean: float) -> SeedResult:
    return SeedResult(f"/runs/s{run_seed}", run_seed, mean, 1.5, 20.0, 4_000, [mean - 1.0, mean + 1.0])


def test_the_card_is_read_back_by_huggingface_hub_with_the_mean_the_std_and_the_iqm(tmp_path):
    pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (pip install 'daskrl[publish]')")
    from huggingface_hub import ModelCard

    from daskrl.publish.card import CardFacts, write_card

    seeds = [seed_result(0, 31.25), seed_result(1, 40.5), seed_result(2, 12.0)]
    across = AcrossSeeds(3, 27.9, (12.0, 40.5))
    facts = CardFacts("CartPole-v1", "appo", Evaluation(20, 12345, False, "latest"), seeds[0], seeds, across,
                      files=["config.json", "checkpoints", "policy.onnx", MANIFEST])
    write_card(tmp_path, facts)
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.library_name == "daskrl"
    assert {"reinforcement-learning", "deep-reinforcement-learning", "CartPole-v1", "appo"} <= set(card.data.tags)
    mean, iqm = card.data.eval_results
    assert mean.metric_type == "mean_reward" and mean.dataset_name == "CartPole-v1"
    assert mean.metric_value == "31.25 +/- 1.50"  # the Hub's RL convention, which its leaderboard parses
    assert mean.metric_args == {"mean": 31.25, "std": 1.5, "episodes": 20, "env_seed": 12345, "deterministic": False}
    assert iqm.metric_type == "iqm_return" and iqm.metric_value == pytest.approx(27.9)
    assert iqm.metric_args["ci95"] == [12.0, 40.5] and iqm.metric_args["seeds"] == 3
    assert "daskrl enjoy --from . --episodes 20 --seed 12345" in card.text
    assert "`policy.onnx`" in card.text and "`replay.mp4`" not in card.text  # the files it has, only


def test_a_card_of_one_seed_has_no_iqm(tmp_path):
    pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (pip install 'daskrl[publish]')")
    from huggingface_hub import ModelCard

    from daskrl.publish.card import CardFacts, write_card

    one = seed_result(0, 9.0)
    write_card(tmp_path, CardFacts("Pendulum-v1", "sac", Evaluation(5, 1, True, "best"), one, [one],
                                   video_note="env 'x' cannot render"))
    card = ModelCard.load(tmp_path / "README.md")
    assert [r.metric_type for r in card.data.eval_results] == ["mean_reward"]
    assert "No video: env 'x' cannot render." in card.text and "--deterministic" in card.text


def test_a_card_of_an_offline_policy_says_it_was_trained_for_updates_from_its_dataset(tmp_path):
    pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (pip install 'daskrl[publish]')")
    from huggingface_hub import ModelCard

    from daskrl.publish.card import CardFacts, write_card

    seeds = [SeedResult(f"/runs/s{s}", s, -140.0 - s, 3.0, 200.0, 0, [-140.0], 20_000 + s, True) for s in range(3)]
    write_card(tmp_path, CardFacts("Pendulum-v1", "iql", Evaluation(20, 1, True, "latest"), seeds[0], seeds,
                                   across_seeds(seeds)))
    text = ModelCard.load(tmp_path / "README.md").text
    assert "for 20,000 updates from its dataset, in the Hugging Face Hub" in text and "0 env steps" not in text
    assert "| 2 | -142.00 | 3.00 | 20,002 updates from its dataset |  |" in text


def test_the_iqm_over_seeds_drops_the_outlying_quarters_and_the_bundle_carries_the_seed_nearest_it():
    results = [seed_result(s, m) for s, m in enumerate([10.0, 20.0, 30.0, 50.0, 1000.0])]
    summary = across_seeds(results)
    assert summary.seeds == 5 and summary.iqm == pytest.approx((20.0 + 30.0 + 50.0) / 3)  # a fifth cut each end
    low, high = summary.ci
    assert 10.0 <= low <= summary.iqm <= high <= 1000.0 and low < high
    assert representative(results, summary).run_seed == 2  # 30 is nearest 33.3; the best seed (1000) is not chosen


def test_an_output_folder_is_refused_when_it_holds_something_unless_it_is_a_bundle_to_overwrite(tmp_path):
    check_output(str(tmp_path / "new"), overwrite=False)  # absent: fine
    (tmp_path / "empty").mkdir()
    check_output(str(tmp_path / "empty"), overwrite=False)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not empty.*--overwrite"):
        check_output(str(mine), overwrite=False)
    with pytest.raises(ConfigError, match="is not a daskrl bundle"):
        check_output(str(mine), overwrite=True)  # a folder of one's own is never deleted
    (mine / MANIFEST).write_text("{}")
    check_output(str(mine), overwrite=True)
    with pytest.raises(ConfigError, match="is a file"):
        check_output(str(mine / "notes.txt"), overwrite=True)


class NotWeights:
    """Something a weights-only load refuses."""


def test_a_bundle_is_a_config_and_a_checkpoint_of_weights_only(tmp_path):
    with pytest.raises(ConfigError, match="not a daskrl bundle .no config.json"):
        bundle_dir(str(tmp_path))
    (tmp_path / "config.json").write_text(Config().to_json())
    with pytest.raises(ConfigError, match="no checkpoint in checkpoints/"):
        bundle_dir(str(tmp_path))
    store = CheckpointStore(tmp_path / "checkpoints")
    store.save({"model": {"w": torch.zeros(2)}, "env_steps": 7, "hook": NotWeights()}, 7)
    with pytest.raises(ConfigError, match="not a checkpoint of weights only"):
        bundle_dir(str(tmp_path))
    store.save({"model": {"w": torch.ones(2)}, "env_steps": 9, "policy_version": 3}, 9)
    assert bundle_dir(str(tmp_path)) == str(tmp_path)
    assert checkpoint_file(str(tmp_path)).endswith("checkpoint_000000000009.pt")  # --init-checkpoint FOLDER


def write_sweep(sweep_dir: Path, trials: list[Trial], **spec: object) -> None:
    sweep_dir.mkdir()
    data = {"name": sweep_dir.name, "base": {"env": "CartPole-v1"}, "space": {"learning_rate": [1e-3, 3e-3]},
            "seeds": 3, "budget_env_steps": 1000, **spec}
    (sweep_dir / "sweep.json").write_text(spec_from_dict(data).to_json())
    write_table(str(sweep_dir), trials)


def finished(config: int, seed: int, value: float, status: str = "finished") -> Trial:
    return Trial(config, seed, {"learning_rate": [1e-3, 3e-3][config]}, status=status, env_steps=1000,
                 final_return=value, final_score=value)


def test_a_sweep_publishes_the_configuration_it_chose_with_every_seed(tmp_path):
    trials = [finished(c, s, v) for c, base in ((0, 10.0), (1, 100.0)) for s, v in enumerate([base, base + 5, base + 9])]
    write_sweep(tmp_path / "sw", trials)
    choice = choose(str(tmp_path / "sw"))
    assert choice.configuration == 1 and choice.seeds == [0, 1, 2] and choice.params == {"learning_rate": 3e-3}
    assert [Path(d).name for d in choice.experiment_dirs] == ["c001-s0", "c001-s1", "c001-s2"]
    assert choice.training_iqm == pytest.approx(np.mean([100.0, 105.0, 109.0]))  # 3 seeds: a cut of none
    assert choice.training_ci[0] <= choice.training_iqm <= choice.training_ci[1]


def test_a_sweep_with_nothing_to_publish_is_one_line_each(tmp_path):
    (tmp_path / "bare").mkdir()
    with pytest.raises(ConfigError, match="no sweep.csv"):
        choose(str(tmp_path / "bare"))
    write_sweep(tmp_path / "empty", [])
    with pytest.raises(ConfigError, match="has no trials yet"):
        choose(str(tmp_path / "empty"))
    write_sweep(tmp_path / "unfinished", [finished(0, 0, 5.0, status="running"), finished(1, 0, math.nan, "failed")])
    with pytest.raises(ConfigError, match="no configuration ran its full budget"):
        choose(str(tmp_path / "unfinished"))
    write_sweep(tmp_path / "tasks", [finished(0, 0, 0.5)], base={},
                tasks={"CartPole-v1": 500.0, "Acrobot-v1": -100.0})
    with pytest.raises(ConfigError, match="several tasks"):
        choose(str(tmp_path / "tasks"))


def refused(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """The one line the command printed, once it exited with status 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def fake_experiment(train_dir: Path, name: str) -> None:
    """An experiment directory with a config and a checkpoint: enough for publish's checks (not for playing)."""
    config = Config.from_flat({"env": "CartPole-v1", "experiment": name, "train_dir": str(train_dir)})
    (train_dir / name).mkdir(parents=True)
    (train_dir / name / "config.json").write_text(config.to_json())
    CheckpointStore(train_dir / name / "checkpoints").save({"model": {}, "env_steps": 0}, 0)


def test_bad_input_to_publish_and_enjoy_from_is_one_line_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    base = ["publish", "--train-dir", str(tmp_path), "--output", str(out)]
    assert "is not a daskrl experiment directory" in refused(capsys, [*base, "--experiment", "nope"])
    (tmp_path / "sweep").mkdir()
    assert "no sweep.csv" in refused(capsys, [*base, "--sweep", str(tmp_path / "sweep")])
    assert "--eval-episodes must be at least 1" in refused(capsys, [*base, "--experiment", "x", "--eval-episodes", "0"])
    assert "not a daskrl bundle" in refused(capsys, ["enjoy", "--from", str(tmp_path / "sweep")])
    assert not out.exists()
    fake_experiment(tmp_path, "cart")
    pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (pip install 'daskrl[publish]')")
    pytest.importorskip("onnxscript", reason="the export extra is not installed (pip install 'daskrl[publish]')")
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert "exists and is not empty" in refused(capsys, [*base, "--experiment", "cart"])
    fake_experiment(tmp_path, "other")
    other = json.loads((tmp_path / "other" / "config.json").read_text())
    other["env"]["env"] = "Acrobot-v1"
    (tmp_path / "other" / "config.json").write_text(json.dumps(other))
    assert "train different envs" in refused(capsys, [*base, "--experiment", "cart", "other"])
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_publish_without_huggingface_hub_says_what_to_install(tmp_path, capsys, monkeypatch):
    fake_experiment(tmp_path, "cart")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # its import raises ImportError
    line = refused(capsys, ["publish", "--train-dir", str(tmp_path), "--experiment", "cart", "--output",
                            str(tmp_path / "out")])
    assert "huggingface_hub, which is not installed: pip install 'daskrl[publish]'" in line
    assert not (tmp_path / "out").exists()
