"""``daskrl publish`` on runs trained for real: a 3-seed sweep of tiny CartPole trials on the module's cluster (its
trials are also the experiments published one at a time). A bundle's card, read by ``huggingface_hub.ModelCard``,
gives the mean return ``daskrl enjoy`` prints for the experiment and for the bundle (``enjoy --from``); its ONNX
file plays without daskrl; a new run starts from its folder (``--init-checkpoint``); the sweep's bundle carries the
IQM of its seeds with a 95% interval; the manifest's digests match the files."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from daskrl import train
from daskrl.cli import main
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.sweep import run_sweep
from daskrl.sweep.results import iqm

from ..helpers import SMALL_CARTPOLE, run_config

pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (pip install 'daskrl[publish]')")
pytest.importorskip("onnxscript", reason="the export extra is not installed (pip install 'daskrl[publish]')")
from huggingface_hub import ModelCard  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EPISODES = 20


@pytest.fixture(scope="module")
def sweep_dir(session, tmp_path_factory) -> Path:
    """A sweep of one configuration and 3 seeds, each a few thousand env steps (its trials: c000-s0..2)."""
    train_dir = tmp_path_factory.mktemp("sweeps")
    spec = {"name": "tiny", "base": {**SMALL_CARTPOLE, "dashboard_address": ""}, "space": {"learning_rate": [3e-3]},
            "seeds": 3, "budget_env_steps": 3_000, "concurrent": 1}
    result = run_sweep(spec, train_dir=str(train_dir), client=session.client, say=lambda line: None)
    assert result["ended"] == "done" and {r["status"] for r in result["rows"]} == {"finished"}, result["rows"]
    return train_dir / "tiny"


@pytest.fixture(scope="module")
def bundle(sweep_dir, tmp_path_factory) -> Path:
    """Trial c000-s0 published through the command line."""
    out = tmp_path_factory.mktemp("hub") / "cartpole"
    assert main(["publish", "--experiment", "c000-s0", "--train-dir", str(sweep_dir), "--output", str(out),
                 "--eval-episodes", str(EPISODES)]) == 0
    return out


def card_mean(folder: Path) -> tuple[float, dict]:
    """The card's mean return, from its ``mean_reward`` string and its args (they must agree), and the card data."""
    card = ModelCard.load(folder / "README.md")
    result = next(r for r in card.data.eval_results if r.metric_type == "mean_reward")
    mean, std = (float(x) for x in result.metric_value.split("+/-"))
    assert mean == pytest.approx(result.metric_args["mean"], abs=0.005)
    assert std == pytest.approx(result.metric_args["std"], abs=0.005)
    return mean, card.data.to_dict()


def enjoy_mean(capsys: pytest.CaptureFixture, *source: str, episodes: int = EPISODES) -> float:
    capsys.readouterr()
    assert main(["enjoy", *source, "--episodes", str(episodes)]) == 0
    line = capsys.readouterr().out
    return float(re.search(r"episodes, return (-?[\d.]+) ±", line).group(1))


def enjoy_command_mean(*source: str) -> float:
    """``daskrl enjoy``'s mean return, in a process of its own (as a user runs it)."""
    done = subprocess.run([sys.executable, "-m", "daskrl", "enjoy", *source, "--episodes", str(EPISODES)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return float(re.search(r"episodes, return (-?[\d.]+) ±", done.stdout).group(1))


def test_the_card_gives_the_mean_return_enjoy_prints_for_the_experiment_and_for_the_bundle(bundle, sweep_dir, capsys):
    mean, data = card_mean(bundle)
    assert data["library_name"] == "daskrl" and "CartPole-v1" in data["tags"]
    assert "reinforcement-learning" in data["tags"] and "deep-reinforcement-learning" in data["tags"]
    command = enjoy_command_mean("--experiment", "c000-s0", "--train-dir", str(sweep_dir))
    from_bundle = enjoy_mean(capsys, "--from", str(bundle))  # in this process, after publish's own enjoy
    assert abs(mean - command) <= 0.1 and abs(mean - from_bundle) <= 0.1, (mean, command, from_bundle)
    with capsys.disabled():
        print(f"\ncard {mean:.2f}, daskrl enjoy --experiment {command:.2f}, enjoy --from {from_bundle:.2f}")


def test_the_bundle_holds_its_files_and_a_manifest_that_names_them(bundle):
    names = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert {"README.md", "config.json", "policy.onnx", "policy.pt2", "replay.mp4", "manifest.json"} <= names
    assert len([n for n in names if n.startswith("checkpoints/checkpoint_")]) == 1
    assert not [p for p in bundle.parent.iterdir() if ".partial" in p.name]  # the staging folder was renamed
    manifest = json.loads((bundle / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((bundle / name).read_bytes()).hexdigest() == entry["sha256"], name
    assert set(manifest["files"]) == names - {"manifest.json"}
    assert manifest["versions"]["torch"] == torch.__version__ and manifest["versions"]["daskrl"]
    assert all(manifest["versions"][k] for k in ("gymnasium", "numpy", "dask"))
    commit = manifest["git"]["commit"]
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}", commit)
    assert manifest["machine"]["cpu_count"] and manifest["machine"]["python"]
    assert len(manifest["evaluation"]["bundled"]["returns"]) == EPISODES
    state = torch.load(next(bundle.glob("checkpoints/*.pt")), weights_only=True)
    assert set(state) == {"model", "env_steps", "train_steps", "policy_version"}  # no optimizer, no code unpickled


def test_the_bundles_onnx_file_plays_without_daskrl(bundle):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "onnx_play.py"), str(bundle / "policy.onnx"),
                           "--episodes", "2"], capture_output=True, text=True, timeout=120, cwd="/")
    assert done.returncode == 0, done.stderr
    returns = [float(line.split()[3]) for line in done.stdout.splitlines() if line.startswith("episode")]
    assert len(returns) == 2 and all(r >= 1 for r in returns), done.stdout


def test_a_new_run_starts_from_the_bundle_folder(bundle, session, tmp_path):
    published = torch.load(next(bundle.glob("checkpoints/*.pt")), weights_only=True)
    # a training step of 8,192 x 64 samples does not come within a 2,000-step budget: the weights stay as loaded
    student = train(run_config(tmp_path, "student", base=SMALL_CARTPOLE, init_checkpoint=str(bundle),
                               batch_size=8192, num_batches_per_epoch=64, train_for_env_steps=2_000),
                    client=session.client)
    state = CheckpointStore(Path(student["experiment_dir"]) / "checkpoints").load("latest")
    assert state["train_steps"] == 0 and set(state["model"]) == set(published["model"])
    for key, value in published["model"].items():
        torch.testing.assert_close(state["model"][key], value, msg=key)


def test_a_sweep_bundle_carries_the_iqm_of_its_seeds_with_an_interval(sweep_dir, tmp_path, capsys):
    out = tmp_path / "sweep_bundle"
    assert main(["publish", "--sweep", str(sweep_dir), "--output", str(out), "--eval-episodes", "5",
                 "--video-episodes", "0"]) == 0
    card = ModelCard.load(out / "README.md")
    result = next(r for r in card.data.eval_results if r.metric_type == "iqm_return")
    manifest = json.loads((out / "manifest.json").read_text())
    seeds = manifest["evaluation"]["seeds"]
    assert [s["experiment"] for s in seeds] == ["c000-s0", "c000-s1", "c000-s2"]
    means = np.array([s["return_mean"] for s in seeds])
    assert result.metric_value == pytest.approx(iqm(means), abs=1e-3) and result.metric_args["seeds"] == 3
    low, high = result.metric_args["ci95"]
    eps = 1e-3  # float rounding: a resample of three equal values has a mean a last bit away from them
    assert min(means) - eps <= low <= result.metric_value + eps and result.metric_value - eps <= high <= max(means) + eps
    bundled = manifest["evaluation"]["bundled"]
    assert bundled["return_mean"] == min(means, key=lambda m: abs(m - iqm(means)))  # the seed nearest the IQM
    assert (out / "sweep.json").is_file() and not (out / "replay.mp4").exists()
    assert abs(card_mean(out)[0] - enjoy_mean(capsys, "--from", str(out), episodes=5)) <= 0.1
