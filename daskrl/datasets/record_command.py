"""``daskrl record --experiment X --episodes N --dataset-id ID``: play a trained policy on the rollout workers of a
sampling-only run and write N whole episodes into a Minari dataset (docs/offline.md).

The run is the experiment's own setup (env, its wrappers and defaults, model, workers) with the learner taken out:
every rollout worker acts with the checkpoint's weights (--init-checkpoint of a sampling-only run) as ``daskrl
enjoy`` plays them, most likely or sampled actions, with --epsilon's uniformly random ones mixed in. Its log and
metrics go to ``<experiment>/records/<dataset id>/``.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from daskrl.config import Config, ConfigError
from daskrl.config.algo_options import MINARI_ID


def add_record_parser(sub: Any) -> None:
    p = sub.add_parser("record", help="play a trained policy on the rollout workers and write its episodes into a "
                                      "Minari dataset (docs/offline.md)", description=__doc__)
    p.add_argument("--experiment", required=True, help="the trained experiment's name")
    p.add_argument("--train-dir", default="train_dir", help="directory that holds experiment directories")
    p.add_argument("--episodes", type=int, required=True, help="whole episodes to record, the first ones of every "
                                                               "env in equal shares")
    p.add_argument("--dataset-id", required=True, metavar="NAMESPACE/ENV/NAME-vN",
                   help="the Minari dataset to create (in $MINARI_DATASETS_PATH or ~/.minari/datasets)")
    p.add_argument("--checkpoint", default="latest", help="'latest', 'best' or a checkpoint file")
    p.add_argument("--deterministic", action="store_true", help="take the most likely action (DQN and TD3 always "
                                                                "do, as daskrl enjoy plays them)")
    p.add_argument("--epsilon", type=float, default=0.0, help="take a uniformly random action with this probability")
    p.add_argument("--seed", type=int, default=12345, help="seed of the envs (daskrl enjoy's default too)")
    p.add_argument("--num-workers", type=int, default=None, help="rollout workers (default: the experiment's)")
    p.add_argument("--num-envs-per-worker", type=int, default=None, help="envs per rollout worker (default: the "
                                                                         "experiment's)")
    p.add_argument("--scheduler", default="", help="address of a Dask scheduler to record on (default: an "
                                                   "embedded cluster)")


def record_config(args: argparse.Namespace) -> Config:
    """The sampling-only run that records ``args``'s dataset (refused in one line where it cannot)."""
    from daskrl.evaluation.loading import read_config

    experiment_dir = os.path.join(args.train_dir, args.experiment)
    config = read_config(experiment_dir)
    if config.policies.num_policies > 1:
        raise ConfigError([f"daskrl record plays one policy; {args.experiment!r} trained "
                           f"{config.policies.num_policies}"])
    if args.episodes < 1:
        raise ConfigError([f"--episodes must be at least 1, got {args.episodes}"])
    if not re.fullmatch(MINARI_ID, args.dataset_id):
        raise ConfigError([f"--dataset-id must be a Minari dataset id (NAMESPACE/ENV/NAME-vN, such as "
                           f"mine/pendulum/expert-v0), got {args.dataset_id!r}"])
    sampler = {k: v for k, v in (("num_workers", args.num_workers), ("num_envs_per_worker", args.num_envs_per_worker))
               if v is not None}
    return config.replace(
        # its log and metrics in the trained experiment's records/, a folder named by the dataset id, which is new
        # (an id taken is refused before the run starts): nothing of another run is overwritten
        experiment=args.dataset_id.replace("/", "_"), train_dir=os.path.join(experiment_dir, "records"),
        overwrite=True, resume=False,
        sampling_only=True, init_checkpoint=checkpoint_path(experiment_dir, config, args.checkpoint),
        sampling_deterministic=args.deterministic, sampling_epsilon=args.epsilon, record_dataset=args.dataset_id,
        record_episodes=args.episodes, seed=args.seed, scheduler=args.scheduler, train_for_env_steps=0,
        train_for_seconds=0.0, stop_at_return=None, eval_interval_env_steps=0, save_video_every_env_steps=0,
        record_schedule=False, deterministic=False, wandb_project="", keep_checkpoint_every_env_steps=0, pbt=False,
        self_play_snapshots=0, league=False, **sampler)

def checkpoint_path(experiment_dir: str, config: Config, which: str) -> str:
    """The file of the experiment's ``which`` checkpoint ('latest', 'best' or a path)."""
    from daskrl.learning.checkpoints import CheckpointStore, checkpoint_dirs

    if which not in ("latest", "best"):
        return which
    store = CheckpointStore(checkpoint_dirs(experiment_dir, config.policies.num_policies)[0])
    path = store.latest() if which == "latest" else store.best()
    if path is None:
        raise ConfigError([f"experiment {experiment_dir!r} has no {which} checkpoint yet"])
    return str(path)


def describe_dataset(summary: dict[str, Any]) -> str:
    """The line a run that recorded a dataset ends with (``daskrl record``'s, ``daskrl train --record-dataset``'s)."""
    if not summary["dataset_episodes"]:
        return (f"daskrl: no episode ended whole before the run stopped (one still running at the stop is not "
                f"recorded): Minari dataset {summary['dataset']} was not created")
    return (f"daskrl: wrote {summary['dataset_episodes']:,} episodes ({summary['dataset_steps']:,} steps) into "
            f"Minari dataset {summary['dataset']}; load it with minari.load_dataset({summary['dataset']!r})")
