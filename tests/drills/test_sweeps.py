"""Sweeps on real clusters: trials packed on an embedded cluster with ASHA; PBT across trials keeping every trial's
hyperparameters true in config.json and its checkpoint through an exploit, a Ctrl-C and a resume; a resume that
runs only what did not finish; a worker SIGKILLed mid-sweep costing no trial; the report in headless Chromium."""

from __future__ import annotations

import html
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from daskrl.learning.checkpoints import CheckpointStore
from daskrl.sweep import run_sweep
from daskrl.sweep.report import PALETTE, write_sweep_report
from daskrl.sweep.trials import read_table, read_trials

from ..browser import CHROMIUM, chromium_cli, colour_pixels, distinct_colours
from ..helpers import SMALL_CARTPOLE, free_port, get_json, slow, wait_for

BASE = {**SMALL_CARTPOLE, "dashboard_address": "", "checkpoint_interval": 2.0}


def sweep_spec(name: str, **over) -> dict:
    return {"name": name, "base": dict(BASE), "space": {"learning_rate": [3e-3, 1e-5]}, "seeds": 2,
            "budget_env_steps": 30_000, "concurrent": 2, **over}


def trial_truth(sweep_dir: Path, trial: str) -> tuple[float, float, float]:
    """(the sweep's learning rate for the trial, its config.json's, its latest checkpoint's)."""
    params = next(t.params for t in read_trials(str(sweep_dir)) if t.trial_id == trial)
    config = json.loads((sweep_dir / trial / "config.json").read_text())["learner"]["learning_rate"]
    state = CheckpointStore(sweep_dir / trial / "checkpoints").load("latest")
    return params["learning_rate"], config, _hyperparams(state)["learning_rate"]


def _hyperparams(state: dict) -> dict:
    return state["hyperparams"] if "hyperparams" in state else state["trainer"]["hyperparams"]


@slow("4 CartPole trials of up to 100k steps on an embedded cluster")
def test_a_sweep_packs_its_trials_stops_the_bad_configuration_and_reports(tmp_path):
    lines: list[str] = []
    result = run_sweep(sweep_spec("packed", early_stopping="asha", rungs=2, reduction=2, budget_env_steps=100_000,
                                  space={"learning_rate": [3e-3, 1e-6]}),
                       train_dir=str(tmp_path), say=lines.append)
    sweep_dir = tmp_path / "packed"
    rows = read_table(str(sweep_dir))
    assert result["ended"] == "done" and len(rows) == 4
    by_config = {c: [r for r in rows if r["configuration"] == c] for c in (0, 1)}
    # configuration 0 (a working learning rate) reaches the rung first and goes on; 1e-6 learns nothing by 50k
    # steps, ranks below it and is stopped there with both seeds, each keeping its checkpoint and rows
    assert {r["status"] for r in by_config[0]} == {"finished"}
    assert all(r["env_steps"] >= 100_000 for r in by_config[0])
    assert {r["status"] for r in by_config[1]} == {"stopped"}, rows
    assert all(50_000 <= r["env_steps"] < 100_000 for r in by_config[1])
    for r in rows:
        assert (sweep_dir / r["trial"] / "metrics.csv").exists()
        assert CheckpointStore(sweep_dir / r["trial"] / "checkpoints").latest() is not None
        config = json.loads((sweep_dir / r["trial"] / "config.json").read_text())
        assert config["run"]["seed"] == r["seed"] and config["learner"]["learning_rate"] == r["params"]["learning_rate"]
    assert result["best"]["configuration"] == 0
    assert any("configuration 1 stopped at 50,000 env steps" in line for line in lines)

    # a resume of a sweep that is done runs nothing again
    before = {r["trial"]: (sweep_dir / r["trial"] / "metrics.csv").stat().st_mtime for r in rows}
    again = run_sweep(resume=str(sweep_dir), train_dir=str(tmp_path), say=lines.append)
    assert again["ended"] == "done"
    assert before == {r["trial"]: (sweep_dir / r["trial"] / "metrics.csv").stat().st_mtime for r in rows}
    _check_report_in_chromium(sweep_dir, tmp_path)


@slow("4 short trials: 2 configurations on CartPole and Acrobot")
def test_a_sweep_over_tasks_runs_each_configuration_on_every_env_and_ranks_it_by_normalized_score(tmp_path):
    base = {k: v for k, v in BASE.items() if k != "env"}
    tasks = {"CartPole-v1": 500.0, "Acrobot-v1": {"reference": -100.0, "random": -500.0}}
    result = run_sweep(sweep_spec("family", base=base, seeds=1, budget_env_steps=40_000, tasks=tasks,
                                  space={"learning_rate": [3e-3, 1e-6]}), train_dir=str(tmp_path), say=print)
    sweep_dir = tmp_path / "family"
    rows = read_table(str(sweep_dir))
    assert result["ended"] == "done" and {(r["configuration"], r["task"]) for r in rows} == {
        (c, t) for c in (0, 1) for t in tasks}
    for r in rows:
        env = json.loads((sweep_dir / r["trial"] / "config.json").read_text())["env"]["env"]
        assert env == r["task"] and r["trial"] == f"c{r['configuration']:03d}-{r['task']}-s0"
        reference, random = (500.0, 0.0) if env == "CartPole-v1" else (-100.0, -500.0)
        assert r["final_score"] == pytest.approx((r["final_return"] - random) / (reference - random), abs=1e-3)
    # a working learning rate against one that learns nothing: chosen by its mean score over both envs
    assert result["best"]["configuration"] == 0, rows
    page = html.unescape(Path(write_sweep_report(str(sweep_dir))).read_text())
    assert "Mean final return per task" in page and "Acrobot-v1 (reference -100)" in page and "mean score" in page
    assert "Probability of improvement and performance profiles" in page and "runs above 0.25" in page


def _check_report_in_chromium(sweep_dir: Path, tmp_path: Path) -> None:
    out = write_sweep_report(str(sweep_dir))
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the report was written, not viewed")
    page = html.unescape(Path(out).read_text())  # the tables are Bokeh Divs: their HTML sits, escaped, in the
    assert page.count("<tr>") >= 1 + 2 + 1 + 4  # document's JSON: the ranking (2 configurations) and the trials (4)
    assert "IQM 95% CI" in page and "c000-s1" in page
    dom = chromium_cli(tmp_path, "--virtual-time-budget=5000", "--dump-dom", f"file://{out}").stdout.decode()
    assert "daskrl sweep: packed" in dom and "bk-Notifications" in dom  # BokehJS ran and built the document
    shot = tmp_path / "sweep.png"
    chromium_cli(tmp_path, "--window-size=1200,900", "--hide-scrollbars", "--virtual-time-budget=5000",
                 f"--screenshot={shot}", f"file://{out}")
    png = shot.read_bytes()
    assert distinct_colours(png) > 20 and colour_pixels(png, PALETTE[0]) > 30, "no learning curve on the page"


def _sweep_process(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "daskrl", "sweep", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _ctrl_c_when(args: list[str], cwd: Path, condition, what: str) -> str:
    """Run ``daskrl sweep ARGS``, send it SIGINT once ``condition()`` holds, and return its output (exit 0)."""
    proc = _sweep_process(args, cwd)
    try:
        wait_for(condition, timeout=180, interval=0.2, what=what)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    return out


def _trained(sweep_dir: Path, trial: str) -> bool:
    """The trial is running and has reported env steps."""
    try:
        return any(t.trial_id == trial and t.status == "running" and t.env_steps > 0
                   for t in read_trials(str(sweep_dir)))
    except (OSError, ValueError):
        return False


def _statuses(sweep_dir: Path) -> dict[str, str]:
    try:
        return {t.trial_id: t.status for t in read_trials(str(sweep_dir))}
    except (OSError, ValueError):
        return {}


@slow("a sweep with PBT across trials, stopped by Ctrl-C and resumed")
def test_pbt_across_trials_keeps_each_trials_hyperparameters_true_through_ctrl_c_and_resume(tmp_path):
    spec = sweep_spec("pbt", seeds=1, budget_env_steps=120_000, space={"learning_rate": [1e-5, 3e-3]},
                      pbt={"period_env_steps": 10_000, "fraction": 0.5, "perturb_factor": 1.5,
                           "ranges": {"learning_rate": [1e-6, 1e-2]}})
    (tmp_path / "pbt.json").write_text(json.dumps(spec))
    sweep_dir = tmp_path / "train_dir" / "pbt"
    out = _ctrl_c_when(["pbt.json"], tmp_path, lambda: (sweep_dir / "pbt.csv").exists()
                       and len((sweep_dir / "pbt.csv").read_text().splitlines()) > 1, "an exploit in pbt.csv")
    assert "continue with: daskrl sweep --resume" in out
    exploits = (sweep_dir / "pbt.csv").read_text().splitlines()[1:]
    target = exploits[0].split(",")[2]
    assert set(_statuses(sweep_dir).values()) == {"interrupted"}
    for trial in ("c000-s0", "c001-s0"):
        swept, config, checkpoint = trial_truth(sweep_dir, trial)
        assert swept == config == checkpoint, (trial, swept, config, checkpoint)
    assert trial_truth(sweep_dir, target)[0] not in (1e-5, 3e-3)  # the exploited one trains with perturbed values

    proc = _sweep_process(["--resume", str(sweep_dir)], tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert set(_statuses(sweep_dir).values()) == {"finished"}, out
    for trial in ("c000-s0", "c001-s0"):
        swept, config, checkpoint = trial_truth(sweep_dir, trial)
        assert swept == config == checkpoint, (trial, swept, config, checkpoint)


@slow("a sweep stopped by Ctrl-C after its first trial, and resumed")
def test_resume_after_ctrl_c_runs_only_the_trials_that_did_not_finish(tmp_path):
    spec = sweep_spec("resume", seeds=1, budget_env_steps=60_000, concurrent=1,
                      space={"learning_rate": [3e-3, 1e-3, 3e-4]})
    (tmp_path / "resume.json").write_text(json.dumps(spec))
    sweep_dir = tmp_path / "train_dir" / "resume"
    _ctrl_c_when(["resume.json"], tmp_path,
                 lambda: _statuses(sweep_dir).get("c000-s0") == "finished" and _trained(sweep_dir, "c001-s0"),
                 "the first trial finished, the second training")
    statuses = _statuses(sweep_dir)
    assert statuses["c000-s0"] == "finished" and statuses["c001-s0"] == "interrupted", statuses
    first = (sweep_dir / "c000-s0" / "metrics.csv").read_text()
    interrupted_steps = next(r["env_steps"] for r in read_table(str(sweep_dir)) if r["trial"] == "c001-s0")

    proc = _sweep_process(["--resume", str(sweep_dir)], tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    rows = {r["trial"]: r for r in read_table(str(sweep_dir))}
    assert {r["status"] for r in rows.values()} == {"finished"}
    assert (sweep_dir / "c000-s0" / "metrics.csv").read_text() == first  # not run again
    assert interrupted_steps > 0 and rows["c001-s0"]["env_steps"] >= 60_000
    # the interrupted trial went on from its checkpoint: its rows continue, they do not start again at 0
    steps = [int(line.split(",")[1]) for line in (sweep_dir / "c001-s0" / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == sorted(steps)


@slow("a sweep on a 4-worker cluster with one worker SIGKILLed")
def test_a_worker_killed_mid_sweep_costs_no_trial(tmp_path):
    from distributed import Client, LocalCluster

    from daskrl.runtime.access.runs import list_runs

    with LocalCluster(n_workers=4, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        killed: list[int] = []

        def kill_one() -> None:
            def running() -> list[str]:
                rows = {t.trial_id: t for t in read_trials(str(tmp_path / "kill"))}
                return [w for run in list_runs(client)["runs"] for w in run["workers"]] \
                    if any(t.env_steps > 5_000 for t in rows.values()) else []
            workers = wait_for(running, timeout=120, interval=0.2, what="a trial past 5k env steps")
            pid = client.run(os.getpid, workers=[workers[0]])[workers[0]]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

        killer = threading.Thread(target=kill_one, daemon=True)
        killer.start()
        result = run_sweep(sweep_spec("kill", seeds=1, budget_env_steps=60_000), train_dir=str(tmp_path),
                           client=client)
        killer.join(timeout=5)
    assert killed, "no worker was killed"
    rows = result["rows"]
    assert len(rows) == 2 and {r["status"] for r in rows} == {"finished"}, rows
    assert all(r["env_steps"] >= 60_000 for r in rows)


def test_a_bad_spec_is_refused_in_one_line_per_problem_before_any_trial(tmp_path):
    (tmp_path / "bad.yaml").write_text("base: {env: CartPole-v1}\nspace:\n  learning_rat: [1e-3]\n"
                                       "  num_epochs: {low: 4, high: 1}\n")
    proc = subprocess.run([sys.executable, "-m", "daskrl", "sweep", "bad.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "did you mean 'learning_rate'" in proc.stderr and "empty range [4, 1]" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "train_dir").exists()


@slow("an Optuna search of 4 short CartPole trials")
def test_an_optuna_search_learns_from_each_configuration_it_told(tmp_path):
    optuna = pytest.importorskip("optuna", reason="the sweep extra is not installed (pip install 'daskrl[sweep]')")
    spec = sweep_spec("tpe", seeds=1, budget_env_steps=10_000, search="tpe", trials=4, early_stopping="median",
                      rungs=2, reduction=2, space={"learning_rate": {"low": 1e-5, "high": 1e-2, "log": True},
                                                   "num_epochs": {"low": 1, "high": 3, "type": "int"}})
    result = run_sweep(spec, train_dir=str(tmp_path))
    rows = result["rows"]
    assert result["ended"] == "done" and len(rows) == 4
    assert all(1e-5 <= r["params"]["learning_rate"] <= 1e-2 and r["params"]["num_epochs"] in (1, 2, 3) for r in rows)
    assert len({r["params"]["learning_rate"] for r in rows}) == 4
    study = optuna.load_study(study_name="tpe", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "tpe" / "optuna.journal"))))
    states = [t.state for t in study.trials]
    assert len(states) == 4 and all(s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
                                    for s in states)
    finished = {r["configuration"]: r["final_return"] for r in rows if r["status"] == "finished"}
    assert {t.number: t.value for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE} == \
        pytest.approx(finished)
    opened_in_optuna_dashboard(tmp_path / "tpe" / "optuna.journal", "tpe", finished)


def opened_in_optuna_dashboard(journal: Path, name: str, finished: dict[int, float]) -> None:
    """``optuna-dashboard <journal>`` as a user starts it: its API lists the sweep's study with every trial, and the
    values of the finished ones."""
    if shutil.which("optuna-dashboard") is None:
        pytest.skip("optuna-dashboard is not installed (pip install 'daskrl[sweep]')")
    port = free_port()
    proc = subprocess.Popen(["optuna-dashboard", str(journal), "--port", str(port), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        studies = wait_for(lambda: _get_json_or_none(f"http://127.0.0.1:{port}/api/studies"), timeout=60,
                           what="optuna-dashboard's API")["study_summaries"]
        [study] = [s for s in studies if s["study_name"] == name]
        detail = get_json(f"http://127.0.0.1:{port}/api/studies/{study['study_id']}")
        values = {t["number"]: t["values"][0] for t in detail["trials"] if t["state"] == "Complete"}
        assert len(detail["trials"]) == 4 and values == pytest.approx(finished)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()


def _get_json_or_none(url: str) -> dict | None:
    try:
        return get_json(url)
    except OSError:  # not listening yet
        return None
