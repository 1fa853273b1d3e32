"""``daskrl publish``: one bundle from one experiment, several seeds of it, or a sweep's chosen configuration.

Everything is checked before any episode is played or file written (the experiments, their checkpoints, the env
being one for all of them, the packages, the output folder); then each experiment is evaluated as ``daskrl enjoy``
plays it (:mod:`.scores`), the policy of the one seed bundled is copied, exported (ONNX and torch.export, through
``daskrl export``'s code, which checks each file against the torch policy) and recorded (a video, where the env
renders), and the card and the manifest are written last, with the digests of what is there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.errors import ConfigError
from daskrl.evaluation.export import export_policy, require_onnx
from daskrl.evaluation.loading import experiment_spaces, load_state, read_config
from daskrl.publish import bundle
from daskrl.publish.card import EXTRA, CardFacts, require_hub, write_card
from daskrl.publish.manifest import build_manifest
from daskrl.publish.scores import Evaluation, across_seeds, evaluate, representative
from daskrl.publish.sweeps import SweepChoice, choose


def publish_experiments(experiment_dirs: list[str], output: str, how: Evaluation, overwrite: bool = False,
                        video_episodes: int = 1, sweep: SweepChoice | None = None,
                        say: Callable[[str], None] = print) -> dict[str, Any]:
    """Write the bundle of these experiments (one, or several seeds of one configuration) to ``output``; returns
    its path and what its card reports."""
    config = check_experiments(experiment_dirs, how.checkpoint)
    how = dataclasses.replace(how, deterministic=how.deterministic or algorithm_of(config).acts_greedily)  # enjoy's
    require_hub()
    require_onnx(what="daskrl publish's ONNX file", install=EXTRA)
    bundle.check_output(output, overwrite)
    results = []
    for directory in experiment_dirs:
        say(f"daskrl publish: playing {how.episodes} episodes of {directory} ({how.checkpoint} checkpoint)")
        results.append(evaluate(directory, read_config(directory).run.seed, how))
    across = across_seeds(results) if len(results) > 1 else None
    chosen = representative(results, across) if across else results[0]
    staging = bundle.staging_folder(output)
    try:
        video_note = _write_files(chosen.experiment_dir, how, staging, video_episodes, sweep)
        files = [*sorted(p.name for p in staging.iterdir()), bundle.MANIFEST]  # the manifest is written last
        facts = CardFacts(config.env.env, config.algo.algo, how, chosen, results, across,
                          sweep.as_dict() if sweep else None, files, video_note)
        write_card(staging, facts)
        _write_manifest(staging, facts, experiment_dirs)
        path = bundle.move_into_place(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"path": path, "env": facts.env, "bundled": chosen.as_dict(), "video": not video_note,
            "iqm": None if across is None else {"value": across.iqm, "ci95": list(across.ci), "seeds": across.seeds}}


def publish_sweep(sweep_dir: str, output: str, how: Evaluation, overwrite: bool = False, video_episodes: int = 1,
                  say: Callable[[str], None] = print) -> dict[str, Any]:
    """The bundle of the configuration a sweep chose, its seeds evaluated afresh."""
    choice = choose(sweep_dir)
    say(f"daskrl publish: sweep {choice.name} chose configuration {choice.configuration} ({len(choice.seeds)} seeds)")
    return publish_experiments(choice.experiment_dirs, output, how, overwrite, video_episodes, choice, say)


def check_experiments(experiment_dirs: list[str], which: str) -> Any:
    """The config of the first experiment, once every one has a checkpoint to publish, one policy, one agent, and
    the same env as the others."""
    if not experiment_dirs:
        raise ConfigError(["daskrl publish needs an experiment (--experiment NAME) or a sweep (--sweep DIR)"])
    configs = []
    for directory in experiment_dirs:
        config = read_config(directory)  # an unknown experiment: one line naming --experiment and --train-dir
        if config.policies.num_policies != 1 or experiment_spaces(config).num_agents > 1:
            raise ConfigError([f"{directory!r} trains several policies or agents: a bundle holds one single-agent "
                               "policy (export each policy with daskrl export --policy K)"])
        load_state(directory, config, which)  # a checkpoint to publish ('has no latest checkpoint yet')
        configs.append(config)
    envs = {(c.env.env, json.dumps(c.env.env_kwargs, sort_keys=True)) for c in configs}
    if len(envs) > 1:
        raise ConfigError([f"these experiments train different envs ({', '.join(sorted(e for e, _ in envs))}): the "
                           "seeds of one bundle share their env"])
    return configs[0]


def _write_files(experiment_dir: str, how: Evaluation, folder: Path, video_episodes: int,
                 sweep: SweepChoice | None) -> str:
    """The policy's files into ``folder``; returns why there is no video ('' when there is one)."""
    from daskrl.evaluation import enjoy

    bundle.copy_policy(experiment_dir, how.checkpoint, folder)
    for fmt, name in (("onnx", bundle.ONNX), ("pt2", bundle.PT2)):
        export_policy(experiment_dir, fmt, which=how.checkpoint, output=str(folder / name))
    if sweep is not None:
        shutil.copyfile(os.path.join(sweep.sweep_dir, bundle.SWEEP_SPEC), folder / bundle.SWEEP_SPEC)
    if video_episodes < 1:
        return "not asked for (--video-episodes 0)"
    try:
        enjoy(experiment_dir, video_episodes, how.checkpoint, deterministic=how.deterministic, seed=how.seed,
              video=str(folder / bundle.VIDEO))
    except ConfigError as exc:  # the env cannot render rgb_array frames, or imageio is missing
        return "; ".join(exc.problems)
    return ""


def _write_manifest(folder: Path, facts: CardFacts, experiment_dirs: list[str]) -> None:
    how = facts.evaluation
    rerun = [how.enjoy_command(),
             f"daskrl train --config {bundle.CONFIG} --train-dir train_dir --experiment rerun_{facts.bundled.run_seed}"]
    if facts.sweep:
        rerun.append(f"daskrl sweep {bundle.SWEEP_SPEC}")
    evaluation = {"episodes": how.episodes, "env_seed": how.seed, "deterministic": how.deterministic,
                  "checkpoint": how.checkpoint, "bundled": facts.bundled.as_dict()}
    if facts.across is not None:  # several seeds: each one's evaluation, and their IQM
        evaluation["seeds"] = [r.as_dict() for r in facts.seeds]
        evaluation["iqm"] = {"value": facts.across.iqm, "ci95": list(facts.across.ci), "seeds": facts.across.seeds,
                             "bootstrap_resamples": facts.across.resamples}
    source = {"experiments": [os.path.abspath(d) for d in experiment_dirs], "env": facts.env, "algo": facts.algo,
              "sweep": facts.sweep, "video": facts.video_note or bundle.VIDEO}
    manifest = build_manifest(source, evaluation, rerun, bundle.file_digests(folder))
    (folder / bundle.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
