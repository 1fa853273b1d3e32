"""The ``daskrl`` command (train, sample, enjoy, export, publish, report...), flags generated from :mod:`daskrl.config`.

Every option is defined once (a typed dataclass field with help text); this module only turns fields into
argparse flags, so the command line and the Python API can never disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import sys
import tempfile
import traceback
import typing
from typing import NoReturn

from daskrl.config import SECTIONS, Config
from daskrl.datasets.record_command import add_record_parser, describe_dataset, record_config
from daskrl.driver.launch.experiment import run_log_path
from daskrl.driver.launch.startup import count_from_process_start
from daskrl.errors import ClusterAccessError, ConfigError, DaskRLError, EnvError, ExperimentInUseError, TrainingError
from daskrl.publish.command import add_publish_parser, run_publish
from daskrl.rerun.command import add_replay_parser, run_replay
from daskrl.serving.command import add_serve_parser, run_serve
from daskrl.sweep.command import add_sweep_parser, print_result, spec_from_args


class Parser(argparse.ArgumentParser):
    """argparse with its errors in one line (the full usage is one ``--help`` away), and unknown options reported by
    the command they were given to, with the nearest known one."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = self.commands.get(getattr(parsed, "command", None), self) if hasattr(self, "commands") else self
            known = [o for action in command._actions for o in action.option_strings]
            hint = difflib.get_close_matches(extra[0], known, n=1)
            command.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {hint[0]}?)" if hint else ""))
        return parsed


def json_object(text: str) -> dict:
    """A JSON object from the command line (``--env-kwargs '{"a": 1}'``)."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{text!r} is JSON but not an object")
    return value


json_object.__name__ = "JSON object"  # argparse names the type in its message: "invalid JSON object value"


def number_or_word(text: str) -> int | str:
    """An option that takes a whole number or a word (``--replay-shards 2`` or ``auto``)."""
    return int(text) if text.strip().lstrip("+-").isdigit() else text


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
            if hint is bool or set(typing.get_args(hint)) == {bool, type(None)}:  # bool | None: None means auto
                group.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
                continue
            if f.metadata.get("choices"):
                kwargs["choices"] = f.metadata["choices"]
            if typing.get_origin(hint) is list:  # whole numbers: one or more; text: any number of items
                item_type = typing.get_args(hint)[0]
                group.add_argument(flag, type=item_type, nargs="+" if item_type is int else "*", **kwargs)
            elif hint is dict:
                group.add_argument(flag, type=json_object, metavar="JSON", **kwargs)
            elif hint in (int, float, str):
                group.add_argument(flag, type=hint, **kwargs)
            elif set(typing.get_args(hint)) == {int, str}:  # a number or a word ('auto'): checked by validate()
                group.add_argument(flag, type=number_or_word, **kwargs)
            else:  # Optional[float] and friends: the first concrete type
                concrete = next(a for a in typing.get_args(hint) if a is not type(None))
                group.add_argument(flag, type=concrete, **kwargs)


def _config_from_args(args: argparse.Namespace) -> Config:
    values = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
    base = Config()
    if getattr(args, "config", None):
        try:
            with open(args.config) as f:
                base = Config.from_json(f.read())
        except (OSError, ValueError) as exc:  # a missing file, bad JSON (a ConfigError names unknown options)
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError([f"--config {args.config!r}: {exc}"]) from exc
    return base.replace(**values)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="daskrl", description="Asynchronous distributed RL (APPO, DQN, SAC) on Dask.")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices  # name -> its parser, for errors about its options
    for name, help_text in (("train", "train a policy"),
                            ("sample", "sampling only (no learner): measure the sampler's frames/s")):
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        p.add_argument("--config", help="a config.json to start from (flags override it)")
        _add_config_flags(p)
    enjoy = sub.add_parser("enjoy", help="run episodes with a trained policy and print the mean return")
    played = enjoy.add_mutually_exclusive_group(required=True)
    played.add_argument("--experiment", help="experiment name")
    played.add_argument("--from", dest="bundle", metavar="FOLDER",
                        help="a bundle written by daskrl publish (or downloaded from the Hub) instead of an experiment")
    enjoy.add_argument("--train-dir", default="train_dir", help="directory that holds experiment directories")
    enjoy.add_argument("--episodes", type=int, default=10, help="episodes to run")
    enjoy.add_argument("--checkpoint", default="latest", help="'latest', 'best' or a checkpoint file")
    enjoy.add_argument("--policy", type=int, default=None,
                       help="with --num-policies: which policy plays (default 0); in a multi-agent env, policy K in "
                            "every seat (default: each agent by the run's --policy-mapping), or the policy that "
                            "plays against --opponent")
    enjoy.add_argument("--opponent", default=None, metavar="random|policy:J|snapshot:V",
                       help="two-player games: who plays the other seat: a uniformly random player (legal moves "
                            "where the game has an action mask), trained policy J, or the self-play snapshot of "
                            "policy version V; prints each seat's wins, draws and losses")
    enjoy.add_argument("--seat", default=None, help="with --opponent: the seat (agent id or position) the policy "
                                                     "plays (default: the seats alternate game by game)")
    enjoy.add_argument("--render", action="store_true", help="render episodes (envs with render_mode='human')")
    enjoy.add_argument("--deterministic", action="store_true", help="take the most likely action")
    enjoy.add_argument("--seed", type=int, default=12345, help="seed of the evaluation env")
    enjoy.add_argument("--video", default=None, metavar="FILE.mp4",
                       help="record the episodes to this video file (envs that render rgb_array; needs the video "
                            "extra: pip install 'daskrl[video]')")
    _add_export_parser(sub)
    report = sub.add_parser("report", help="write a self-contained HTML report of an experiment (curves, "
                                           "throughput, time breakdown)")
    which = report.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment", help="experiment name")
    which.add_argument("--sweep", metavar="DIR", help="a sweep's directory: its configurations across seeds")
    report.add_argument("--train-dir", default="train_dir", help="directory that holds experiment directories")
    report.add_argument("--output", default=None, help="HTML file to write (default: <experiment dir>/report.html)")
    add_sweep_parser(sub)
    add_serve_parser(sub)
    add_publish_parser(sub)
    add_replay_parser(sub)
    add_record_parser(sub)
    runs = sub.add_parser("runs", help="list the daskrl runs training on a Dask cluster (name, experiment, workers, "
                                       "frames/s, return, age)")
    runs.add_argument("--scheduler", required=True, help="address of the Dask scheduler, such as tcp://host:8786")
    runs.add_argument("--connect-timeout", type=float, default=10.0, help="seconds the scheduler gets to answer")
    return parser


def _add_export_parser(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="write a trained policy's forward pass to ONNX or TorchScript, for use "
                                           "without daskrl (docs/export.md)")
    export.add_argument("--experiment", required=True, help="experiment name")
    export.add_argument("--train-dir", default="train_dir", help="directory that holds experiment directories")
    export.add_argument("--format", default="onnx", choices=("onnx", "pt2", "torchscript"),
                        help="onnx (the default; needs the export extra: pip install 'daskrl[export]'), pt2 "
                             "(torch.export's program; torch only) or torchscript (torch only; deprecated upstream)")
    export.add_argument("--policy", type=int, default=0, help="with --num-policies: which policy to export")
    export.add_argument("--which", default="latest", choices=("latest", "best"), help="which checkpoint")
    export.add_argument("--output", default=None, metavar="FILE",
                        help="file to write (default: <experiment dir>/export/policy_<K>_<which>.onnx or .pt)")


def main(argv: list[str] | None = None) -> int:
    """Run the command; every failure ends in one readable block on stderr and an exit status: 2 for what the user
    can fix before a run (options, env, cluster access, a busy experiment), 1 for a run that stopped."""
    args = build_parser().parse_args(argv)
    config: Config | None = None
    try:
        if args.command in ("train", "sample"):
            config = _config_from_args(args)
            if args.command == "sample":
                config.run.sampling_only = True
            return _train(config.validate())
        if args.command == "report":
            return _report(args.sweep or os.path.join(args.train_dir, args.experiment), args.output,
                           sweep=bool(args.sweep))
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "runs":
            return _runs(args.scheduler, args.connect_timeout)
        if args.command == "serve":
            return run_serve(args)
        if args.command == "export":
            return _export(args)
        if args.command == "publish":
            return run_publish(args)
        if args.command == "replay":
            return run_replay(args)
        if args.command == "record":
            config = record_config(args)
            return _train(config.validate())
        return _enjoy(args)
    except (ConfigError, EnvError, ExperimentInUseError, ClusterAccessError) as exc:
        print(f"daskrl: error: {exc}", file=sys.stderr)
        return 2
    except TrainingError as exc:
        print(f"daskrl: training stopped: {exc}", file=sys.stderr)
        _point_to_log(config)
        return 1
    except DaskRLError as exc:  # a component could not be created or answered no more
        print(f"daskrl: error: {exc}", file=sys.stderr)
        _point_to_log(config)
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C while the run stopped in order (the first asked for that stop)
        print("daskrl: interrupted again: stopped without waiting for the run to stop in order; the checkpoints "
              "written before are intact (--resume goes on from the newest)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`daskrl train | head`): stop as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # the exit status of a process ended by SIGPIPE
    except Exception as exc:  # a bug: one line here, the traceback in the run's log (or a file of its own)
        where = _log_traceback(config, exc)
        print(f"daskrl: error: unexpected {type(exc).__name__}: {exc} (a bug in daskrl, please report it; "
              f"the traceback is in {where})", file=sys.stderr)
        return 1


def _train(config: Config) -> int:
    from daskrl.driver.launch.preflight import preflight

    preflight(config)  # a bad option, env or size is refused before any process starts (the forkserver included)
    from daskrl.runtime.workers import worker_server

    if config.deploy.show:  # --deploy's dry run
        worker_server.stop()
        return _show_deployment(config)
    embedded = not config.run.scheduler and not config.run.serial and config.deploy.deploy == "local"
    if embedded:  # (--serial's workers are threads of this process; --deploy's run in its jobs or on its hosts)
        worker_server.start()  # a no-op when daskrl/__main__.py started it; main() called from Python did not
    else:  # a --config file named a scheduler, say: the server daskrl/__main__.py guessed would be needed is not
        worker_server.stop()
    from daskrl.api import train

    count_from_process_start()  # this run's start-up line counts the interpreter and the imports too
    summary = train(config)
    _print_summary(summary, sampling=config.run.sampling_only)
    return 0


def _show_deployment(config: Config) -> int:
    from daskrl.driver.launch.deployment import deploy_spec
    from daskrl.driver.launch.start import sizing_for
    from daskrl.runtime.deploy import describe_deployment

    print(describe_deployment(deploy_spec(config, sizing_for(config))))
    return 0


def _enjoy(args: argparse.Namespace) -> int:
    from daskrl.evaluation import enjoy
    from daskrl.evaluation.episodes import trained_for
    from daskrl.publish.bundle import bundle_dir

    directory = bundle_dir(args.bundle) if args.bundle else os.path.join(args.train_dir, args.experiment)
    result = enjoy(directory, args.episodes, args.checkpoint,
                   render=args.render, deterministic=args.deterministic, seed=args.seed, video=args.video,
                   policy=args.policy, opponent=args.opponent, seat=args.seat)
    if result.get("multi_agent"):
        from daskrl.evaluation.multi_agent_enjoy import describe

        for line in describe(result):
            print(f"daskrl enjoy: {line}")
    else:
        print(f"daskrl enjoy: {result['episodes']} episodes, return {result['return_mean']:.2f} ± "
              f"{result['return_std']:.2f} (mean length {result['length_mean']:.1f}; policy trained for "
              f"{trained_for(result)}, "
              f"{result['checkpoint']} checkpoint)")
    if result["video"]:
        print(f"daskrl enjoy: wrote {result['video']} ({result['video_frames']:,} frames)")
    return 0


def _export(args: argparse.Namespace) -> int:
    from daskrl.evaluation.episodes import trained_for
    from daskrl.evaluation.export import export_policy

    result = export_policy(os.path.join(args.train_dir, args.experiment), args.format, policy=args.policy,
                           which=args.which, output=args.output)
    print(f"daskrl export: wrote {result['path']} ({result['format']}; policy {result['policy']} trained for "
          f"{trained_for(result)}, {result['checkpoint']} checkpoint; checked against the torch policy)")
    for what in ("inputs", "outputs"):
        print(f"  {what + ':':8} " + ", ".join(f"{t['name']} [{', '.join(map(str, t['shape']))}] {t['dtype']}"
                                               for t in result[what]))
    return 0


def _point_to_log(config: Config | None) -> None:
    path = run_log_path(config.experiment_dir) if config is not None and config.run.experiment else ""
    if path and os.path.exists(path):
        print(f"daskrl: the full log, with tracebacks, is in {path}", file=sys.stderr)


def _log_traceback(config: Config | None, exc: BaseException) -> str:
    """Append the traceback to the run's log when it has one, else to a file of its own; returns where."""
    path = run_log_path(config.experiment_dir) if config is not None and config.run.experiment else ""
    if not path or not os.path.isdir(os.path.dirname(path)):
        fd, path = tempfile.mkstemp(prefix="daskrl-error-", suffix=".log")
        os.close(fd)
    with open(path, "a") as f:
        f.write("".join(traceback.format_exception(exc)))
    return path


def _report(directory: str, output: str | None, sweep: bool = False) -> int:
    from daskrl.monitor.figures.report import write_report
    from daskrl.sweep.report import write_sweep_report

    try:
        path = (write_sweep_report if sweep else write_report)(directory, output)
    except ConfigError as exc:  # one line: what is missing and where it was looked for
        print(f"daskrl report: error: {'; '.join(exc.problems)}", file=sys.stderr)
        return 2
    print(f"daskrl report: wrote {path}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from daskrl.sweep import run_sweep

    spec = None if args.resume else spec_from_args(args)  # a bad spec: one line per problem, before any trial
    if not args.scheduler:
        from daskrl.runtime.workers import worker_server

        worker_server.start()  # the embedded cluster's workers import torch while this process imports the rest
    result = run_sweep(spec, train_dir=args.train_dir, scheduler=args.scheduler, resume=args.resume)
    print_result(result)
    return 0


def _runs(address: str, timeout: float) -> int:
    from daskrl.runtime.access.existing_cluster import open_client
    from daskrl.runtime.access.runs import list_runs

    client = open_client(address, None, timeout)
    try:
        table = list_runs(client)
    finally:
        client.close()
    runs = sorted(table["runs"], key=lambda r: r["started"])
    if not runs:
        print(f"daskrl runs: no daskrl run is training on {address} ({len(table['workers'])} workers)")
        return 0
    print(f"{'run':24} {'state':9} {'workers':>7} {'env steps':>12} {'frames/s':>10} {'return':>8} {'age':>8}  experiment")
    for r in runs:
        report = r.get("report") or {}
        ret = report.get("episode_return_mean")
        print(f"{r['name'][:24]:24} {r['state']:9} {len(r['workers']):>7} {report.get('env_steps') or 0:>12,} "
              f"{report.get('fps') or 0:>10,.0f} {'-' if ret is None else f'{ret:.1f}':>8} {r['age_s']:>7.0f}s  "
              f"{r['experiment']}")
    held = sum(len(r["workers"]) for r in runs)
    print(f"daskrl runs: {len(runs)} run(s) hold {held} of the cluster's {len(table['workers'])} workers")
    return 0


def _print_offline_summary(summary: dict) -> None:
    """An offline run plays no episode while it trains: its updates, and its newest evaluation if it made any."""
    evaluation = summary.get("last_evaluation")
    judged = (f"last evaluation {evaluation['eval_return_mean']:.1f} over {evaluation['eval_episodes']:.0f} "
              f"episodes at {evaluation['eval_updates']:,.0f} updates" if evaluation
              else "no evaluation (--eval-interval-updates; or `daskrl enjoy` now)")
    print(f"daskrl: made {summary['learner_updates']:,} learner updates in {summary['elapsed_s']:.1f} s from "
          f"{summary_dataset(summary)}; {judged}; results in {summary['experiment_dir']}")


def summary_dataset(summary: dict) -> str:
    """The dataset an offline run trained from, as its shards held it."""
    shards = summary.get("replay_shards") or []
    size = sum(int(s.get("dataset_size", 0)) for s in shards)
    return f"{size:,} transitions in {len(shards)} shard{'s' * (len(shards) != 1)}"


def _print_summary(summary: dict, sampling: bool) -> None:
    if summary.get("offline"):
        _print_offline_summary(summary)
    else:
        what = "sampled" if sampling else "trained"
        episodes = summary.get("episodes_in_mean", 0)
        returns = (f"mean return {summary['episode_return_mean']:.1f} over the last {episodes} episodes" if episodes
                   else "no episode ended")  # a short run, or a resume that ended before its first episode
        print(f"daskrl: {what} {summary['env_steps']:,} env steps in {summary['elapsed_s']:.1f} s "
              f"({summary['mean_fps']:,.0f} frames/s on average, {summary['fps']:,.0f} at the end); {returns}; "
              f"results in {summary['experiment_dir']}")
    startup = summary.get("startup") or {}
    if startup.get("first_step_s") is not None:
        print(f"daskrl: first training step {startup['first_step_s']:.2f} s after launch (components ready at "
              f"{startup['ready_s']:.2f} s)")
    if summary.get("dataset"):
        print(describe_dataset(summary))
    in_bfloat16 = sorted(name for name, p in summary.get("inference_precision", {}).items() if p == "bfloat16")
    if in_bfloat16:  # 'auto' may have chosen it on these hosts: say so, and how to keep float32
        print(f"daskrl: {', '.join(in_bfloat16)} ran the policy's encoder in bfloat16 "
              f"(--inference-precision float32 keeps it in float32)")


if __name__ == "__main__":
    sys.exit(main())
