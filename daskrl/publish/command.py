"""daskrl publish: a trained policy, its evaluation and what reruns it, as a folder in the Hugging Face Hub's model
layout (this module: the command's flags and the lines it prints).

    daskrl publish --experiment cartpole --output hub/cartpole --eval-episodes 20
    daskrl publish --experiment cartpole_s0 cartpole_s1 cartpole_s2 --output hub/cartpole   # seeds: IQM, interval
    daskrl publish --sweep train_dir/sweep_cartpole --output hub/sweep_cartpole           # the sweep's choice
    daskrl enjoy --from hub/cartpole --episodes 20                                          # plays the bundle

The folder is in the Hugging Face Hub's model layout and is written offline; push it unchanged with
huggingface_hub.upload_folder(repo_id=..., folder_path=...) (docs/export.md, "Publishing a result").
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_publish_parser(sub: Any) -> None:
    p = sub.add_parser("publish", help="write a trained policy, its evaluation, exports, a video and what reruns it "
                                       "as a folder in the Hugging Face Hub's model layout (offline)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment", nargs="+", metavar="NAME",
                       help="the experiment to publish; several: seeds of one configuration (the card gives their "
                            "IQM with a 95%% bootstrap interval and the bundle holds the seed nearest it)")
    which.add_argument("--sweep", metavar="DIR", help="a sweep's directory: publish the configuration it chose, "
                                                      "its seeds evaluated as with several experiments")
    p.add_argument("--train-dir", default="train_dir", help="directory that holds the experiment directories")
    p.add_argument("--output", required=True, metavar="FOLDER", help="the bundle's folder (new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace a bundle that is at --output")
    p.add_argument("--eval-episodes", type=int, default=10,
                   help="episodes played per seed for the card, as daskrl enjoy --episodes plays them (default: 10)")
    p.add_argument("--seed", type=int, default=12345, help="seed of the evaluation env, as daskrl enjoy's (default: "
                                                           "12345)")
    p.add_argument("--deterministic", action="store_true", help="evaluate with the most likely action")
    p.add_argument("--checkpoint", default="latest", choices=("latest", "best"), help="which checkpoint to publish")
    p.add_argument("--video-episodes", type=int, default=1,
                   help="episodes recorded to replay.mp4 where the env renders (0: no video; default: 1)")


def run_publish(args: argparse.Namespace) -> int:
    """Write the bundle and say what its card reports; bad input ends in one line (exit 2) before any work."""
    from daskrl.errors import ConfigError
    from daskrl.publish.assemble import publish_experiments, publish_sweep
    from daskrl.publish.scores import Evaluation

    if args.eval_episodes < 1 or args.video_episodes < 0:
        raise ConfigError(["--eval-episodes must be at least 1 and --video-episodes at least 0"])
    how = Evaluation(args.eval_episodes, args.seed, args.deterministic, args.checkpoint)
    if args.sweep:
        result = publish_sweep(args.sweep, args.output, how, args.overwrite, args.video_episodes)
    else:
        dirs = [os.path.join(args.train_dir, name) for name in args.experiment]
        result = publish_experiments(dirs, args.output, how, args.overwrite, args.video_episodes)
    print_result(result, how)
    return 0


def print_result(result: dict[str, Any], how: Any) -> None:
    mine = result["bundled"]
    print(f"daskrl publish: wrote {result['path']} ({result['env']}, {mine['experiment']}: return "
          f"{mine['return_mean']:.2f} ± {mine['return_std']:.2f} over {how.episodes} episodes, env seed {how.seed}"
          f"{'' if result['video'] else '; no video'})")
    if result["iqm"]:
        low, high = result["iqm"]["ci95"]
        print(f"daskrl publish: IQM of {result['iqm']['seeds']} seeds' mean returns {result['iqm']['value']:.2f} "
              f"(95% bootstrap interval [{low:.2f}, {high:.2f}])")
    print(f"daskrl publish: play it with {how.enjoy_command(result['path'])}; push it with huggingface_hub's "
          "upload_folder (docs/export.md)")
