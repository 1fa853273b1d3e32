"""A bundle's ``README.md``: the Hugging Face Hub's model card, its YAML metadata written by ``huggingface_hub``.

The metadata (``library_name: daskrl``, tags, the env, ``model-index``) is written and read by the Hub's own
library, so the Hub, its RL leaderboard and ``huggingface_hub.ModelCard.load`` read what they expect: the mean
return as ``mean_reward`` in their ``"mean +/- std"`` convention (the numbers also in its ``args``), and over
several seeds the IQM of the seeds' mean returns as ``iqm_return`` with its 95% interval in ``args``. The text
below the metadata says what was measured, how to play and retrain the policy, and where each file is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daskrl.errors import ConfigError
from daskrl.publish.bundle import CARD, CHECKPOINTS, CONFIG, MANIFEST, ONNX, PT2, SWEEP_SPEC, VIDEO
from daskrl.publish.scores import AcrossSeeds, Evaluation, SeedResult

#: what installs the Hub's library (and the exporters and video writer a bundle needs)
EXTRA = "pip install 'daskrl[publish]'"
TASK = "reinforcement-learning"


@dataclass
class CardFacts:
    """What a card states: the policy bundled, how it was evaluated, and over several seeds their summary."""

    env: str
    algo: str
    evaluation: Evaluation
    bundled: SeedResult
    seeds: list[SeedResult]
    across: AcrossSeeds | None = None
    sweep: dict[str, Any] | None = None
    files: list[str] = field(default_factory=list)
    video_note: str = ""

    @property
    def model_name(self) -> str:
        return f"daskrl-{self.algo}-{self.env}"


def require_hub() -> None:
    """huggingface_hub must import, or one line says what to install."""
    try:
        import huggingface_hub  # noqa: F401
    except ImportError as exc:
        raise ConfigError([f"daskrl publish writes the model card with huggingface_hub, which is not installed: "
                           f"{EXTRA}"]) from exc


def write_card(folder: Path, facts: CardFacts) -> None:
    """Write ``README.md`` into ``folder``."""
    from huggingface_hub import ModelCard, ModelCardData

    data = ModelCardData(library_name="daskrl", model_name=facts.model_name,
                         tags=[TASK, "deep-reinforcement-learning", "daskrl", facts.algo, facts.env],
                         eval_results=eval_results(facts))
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body(facts)}")
    card.save(folder / CARD)


def eval_results(facts: CardFacts) -> list[Any]:
    """``model-index``'s metrics: the bundled policy's mean return, and the IQM over seeds where there are several."""
    from huggingface_hub import EvalResult

    how, mine = facts.evaluation, facts.bundled
    common = {"task_type": TASK, "task_name": TASK, "dataset_type": facts.env, "dataset_name": facts.env}
    results = [EvalResult(**common, metric_type="mean_reward", metric_value=f"{mine.return_mean:.2f} +/- "
                          f"{mine.return_std:.2f}", metric_name="mean return of the evaluation episodes",
                          metric_args={"mean": mine.return_mean, "std": mine.return_std, "episodes": how.episodes,
                                       "env_seed": how.seed, "deterministic": how.deterministic})]
    if facts.across is not None:
        a = facts.across
        results.append(EvalResult(**common, metric_type="iqm_return", metric_value=round(a.iqm, 4),
                                  metric_name=f"IQM of {a.seeds} seeds' mean returns",
                                  metric_args={"ci95": [a.ci[0], a.ci[1]], "seeds": a.seeds,
                                               "episodes_per_seed": how.episodes, "bootstrap_resamples": a.resamples}))
    return results


def body(facts: CardFacts) -> str:
    """The card's text: a title, the results, how to use the files, and what is in the folder."""
    how, mine = facts.evaluation, facts.bundled
    actions = "the most likely action" if how.deterministic else "actions sampled from the policy"
    lines = [f"# {facts.algo.upper()} on {facts.env}, trained with daskrl", "",
             f"A policy trained by daskrl ({facts.algo}) on `{facts.env}` for "
             f"{mine.trained_for}, in the Hugging Face Hub's model layout.", "",
             "## Evaluation", "",
             f"{how.episodes} episodes with {actions}, env seed {how.seed}, as `{how.enjoy_command()}` plays them: mean "
             f"return **{mine.return_mean:.2f}** (std {mine.return_std:.2f}, mean length {mine.length_mean:.1f}).", ""]
    lines += _seeds_section(facts)
    lines += _usage_section(facts)
    return "\n".join(lines) + "\n"


def _seeds_section(facts: CardFacts) -> list[str]:
    if facts.across is None:
        return []
    a, how = facts.across, facts.evaluation
    lines = [f"Over {a.seeds} seeds of the same configuration, each played the same way: interquartile mean of "
             f"their mean returns **{a.iqm:.2f}**, 95% bootstrap interval [{a.ci[0]:.2f}, {a.ci[1]:.2f}] "
             f"({a.resamples} resamples, as rliable computes it). The bundled policy is the seed nearest that IQM "
             "(not the best one).", ""]
    if facts.sweep:
        s = facts.sweep
        low, high = s["final_training_return_ci95"]
        lines += [f"The configuration is sweep `{s['sweep']}`'s choice, configuration {s['configuration']} "
                  f"({', '.join(f'{k}={v}' for k, v in s['params'].items())}): IQM of its seeds' final training "
                  f"returns {s['final_training_return_iqm']:.2f} [{low:.2f}, {high:.2f}].", ""]
    lines += ["| run seed | mean return | std | trained for | bundled |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r.run_seed} | {r.return_mean:.2f} | {r.return_std:.2f} | {r.trained_for} | "
              f"{'yes' if r is facts.bundled else ''} |" for r in facts.seeds]
    return [*lines, "", f"(each seed: {how.episodes} episodes)", ""]


def _usage_section(facts: CardFacts) -> list[str]:
    files = {CONFIG: "the config the policy was trained with (`daskrl train --config config.json`)",
             f"{CHECKPOINTS}/": "its checkpoint: the network with its observation and return statistics",
             ONNX: "the policy for onnxruntime, without daskrl (docs/export.md in daskrl)",
             PT2: "the policy as torch.export's program (`torch.export.load`)",
             VIDEO: "an episode of the policy",
             SWEEP_SPEC: "the sweep's spec (`daskrl sweep sweep.json` runs the sweep again)",
             MANIFEST: "package versions, the source commit, the machine, the evaluation's returns and each "
                       "file's sha256: what reruns and checks the result"}
    present = [f"- `{name}`: {what}" for name, what in files.items()
               if name.rstrip("/") in facts.files or name in facts.files]
    lines = ["## Use", "", "```bash",
             f"{facts.evaluation.enjoy_command()}   # the evaluation above (in this folder, daskrl installed)",
             "daskrl train --env " + facts.env + " --init-checkpoint . --experiment from_bundle   # train on from it",
             "python examples/onnx_play.py " + ONNX + "   # daskrl's example: onnxruntime and gymnasium only",
             "```", "", "## Files", "", *present]
    if facts.video_note:
        lines += ["", f"No video: {facts.video_note}."]
    return lines
