"""The ``daskrl`` command: ``train``, ``sample``, ``enjoy`` and ``report``, with flags generated from :mod:`daskrl.config`.

Every option is defined once (a typed dataclass field with help text); this module only turns fields into
argparse flags, so the command line and the Python API can never disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing

from daskrl.config import SECTIONS, Config, ConfigError


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for section, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{section} options")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            flag = "--" + f.name.replace("_", "-")
            hint = hints[f.name]
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            kwargs: dict = {"dest": f.name, "default": argparse.SUPPRESS,
                            "help": f"{f.metadata.get('help', '')} (default: {default!r})"}
            if hint is bool:
                group.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
                continue
            if f.metadata.get("choices"):
                kwargs["choices"] = f.metadata["choices"]
            if hint is list or typing.get_origin(hint) is list:
                group.add_argument(flag, type=int, nargs="+", **kwargs)
            elif hint is dict:
                group.add_argument(flag, type=json.loads, metavar="JSON", **kwargs)
            elif hint in (int, float, str):
                group.add_argument(flag, type=hint, **kwargs)
            else:  # Optional[float] and friends: the first concrete type
                concrete = next(a for a in typing.get_args(hint) if a is not type(None))
                group.add_argument(flag, type=concrete, **kwargs)


def _config_from_args(args: argparse.Namespace) -> Config:
    values = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
    base = Config()
    if getattr(args, "config", None):
        with open(args.config) as f:
            base = Config.from_json(f.read())
    return base.replace(**values)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daskrl", description="Asynchronous distributed RL (APPO) on Dask.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("train", "train a policy"),
                            ("sample", "sampling only (no learner): measure the sampler's frames/s")):
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        p.add_argument("--config", help="a config.json to start from (flags override it)")
        _add_config_flags(p)
    enjoy = sub.add_parser("enjoy", help="run episodes with a trained policy and print the mean return")
    enjoy.add_argument("--experiment", required=True, help="experiment name")
    enjoy.add_argument("--train-dir", default="train_dir", help="directory that holds experiment directories")
    enjoy.add_argument("--episodes", type=int, default=10, help="episodes to run")
    enjoy.add_argument("--checkpoint", default="latest", help="'latest', 'best' or a checkpoint file")
    enjoy.add_argument("--render", action="store_true", help="render episodes (envs with render_mode='human')")
    enjoy.add_argument("--deterministic", action="store_true", help="take the most likely action")
    enjoy.add_argument("--seed", type=int, default=12345, help="seed of the evaluation env")
    report = sub.add_parser("report", help="write a self-contained HTML report of an experiment (curves, "
                                           "throughput, time breakdown)")
    report.add_argument("--experiment", required=True, help="experiment name")
    report.add_argument("--train-dir", default="train_dir", help="directory that holds experiment directories")
    report.add_argument("--output", default=None, help="HTML file to write (default: <experiment dir>/report.html)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("train", "sample") and not getattr(args, "scheduler", ""):
        try:  # a bad configuration is refused before any process starts (the forkserver below included)
            config = _config_from_args(args).validate()
        except ConfigError as exc:
            print(f"daskrl: error: {exc}", file=sys.stderr)
            return 2
        if not config.run.serial:  # (with --serial the workers are threads of this process)
            from daskrl.runtime.cluster import prestart_worker_server

            prestart_worker_server()  # the embedded cluster's workers import torch while we do
    from daskrl.envs import EnvError
    from daskrl.experiment import ExperimentInUseError

    try:
        if args.command in ("train", "sample"):
            from daskrl.runner import TrainingError, train
            from daskrl.runtime.cluster import ClusterAccessError

            config = _config_from_args(args)
            if args.command == "sample":
                config.run.sampling_only = True
            try:
                summary = train(config)
            except TrainingError as exc:
                print(f"daskrl: training stopped: {exc}", file=sys.stderr)
                return 1
            except ClusterAccessError as exc:  # unreachable cluster, missing or untrusted TLS credentials
                print(f"daskrl: error: {exc}", file=sys.stderr)
                return 2
            _print_summary(summary, sampling=config.run.sampling_only)
            return 0
        import os

        if args.command == "report":
            return _report(os.path.join(args.train_dir, args.experiment), args.output)
        from daskrl.evaluation import enjoy

        result = enjoy(os.path.join(args.train_dir, args.experiment), args.episodes, args.checkpoint,
                       render=args.render, deterministic=args.deterministic, seed=args.seed)
        print(f"daskrl enjoy: {result['episodes']} episodes, return {result['return_mean']:.2f} ± "
              f"{result['return_std']:.2f} (mean length {result['length_mean']:.1f}; policy trained for "
              f"{result['env_steps_trained']:,} env steps, {result['checkpoint']} checkpoint)")
        return 0
    except (ConfigError, EnvError, ExperimentInUseError) as exc:
        print(f"daskrl: error: {exc}", file=sys.stderr)
        return 2


def _report(experiment_dir: str, output: str | None) -> int:
    from daskrl.monitor.report import write_report

    try:
        path = write_report(experiment_dir, output)
    except ConfigError as exc:  # one line: what is missing and where it was looked for
        print(f"daskrl report: error: {'; '.join(exc.problems)}", file=sys.stderr)
        return 2
    print(f"daskrl report: wrote {path}")
    return 0


def _print_summary(summary: dict, sampling: bool) -> None:
    what = "sampled" if sampling else "trained"
    ret = summary["episode_return_mean"]
    print(f"daskrl: {what} {summary['env_steps']:,} env steps in {summary['elapsed_s']:.1f} s "
          f"({summary['mean_fps']:,.0f} frames/s on average, {summary['fps']:,.0f} at the end); "
          f"mean return {ret:.1f} over the last 100 episodes; results in {summary['experiment_dir']}")
    in_bfloat16 = sorted(name for name, p in summary.get("inference_precision", {}).items() if p == "bfloat16")
    if in_bfloat16:  # 'auto' may have chosen it on these hosts: say so, and how to keep float32
        print(f"daskrl: {', '.join(in_bfloat16)} ran the policy's encoder in bfloat16 "
              f"(--inference-precision float32 keeps it in float32)")


if __name__ == "__main__":
    sys.exit(main())
