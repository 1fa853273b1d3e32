"""``--checkpoint-replay``: the replay shards' contents saved with every checkpoint, and loaded on ``--resume``.

An observer (:mod:`daskrl.driver.observers`): after each checkpoint of the learners it has every shard write its
transitions to ``<experiment>/replay/<shard>.npz`` (:mod:`daskrl.replay.persistence`); when a resumed run starts it
has every shard load its file. The shards write and read there themselves, so their workers must see the experiment
directory (one host, or a shared file system).
"""

from __future__ import annotations

import os

from daskrl.driver.observers import Observer, Run
from daskrl.errors import ComponentError

#: seconds a shard may take to write or read its file (a full Atari shard is gigabytes)
SAVE_TIMEOUT_S = 600


class ReplayCheckpoints(Observer):
    def _path(self, run: Run, shard: str) -> str:
        return os.path.join(run.config.experiment_dir, "replay", f"{shard}.npz")

    def on_start(self, run: Run) -> None:
        if not run.config.run.resume:
            return
        loaded = {}
        for shard in run.fleet.replay:
            loaded[shard.name] = shard.call("load", self._path(run, shard.name), timeout=SAVE_TIMEOUT_S)
        if any(loaded.values()):
            run.say("daskrl: replay refilled from the experiment: "
                    + ", ".join(f"{name} {n:,} transitions" for name, n in loaded.items()))

    def on_checkpoint(self, run: Run, env_steps: int) -> None:
        for shard in run.fleet.replay:
            try:
                shard.call("save", self._path(run, shard.name), timeout=SAVE_TIMEOUT_S)
            except ComponentError as exc:  # a shard lost meanwhile: it comes back empty, its last file stays
                run.warn(f"{shard.name} did not save its transitions: {exc}")
