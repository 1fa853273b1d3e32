"""``--checkpoint-replay``: the replay shards' contents saved with every checkpoint, and loaded on ``--resume``.

An observer (:mod:`daskrl.driver.loop.observers`): after each checkpoint of the learners it has every shard write its
transitions to ``<experiment>/replay/<shard>.npz`` (:mod:`daskrl.replay.persistence`), the shards an elastic run
added included; when a resumed run starts it has every shard load its file, and a shard added later (a host that
joined) loads its own file, if there is one, before it takes a slot. A file whose shard the resumed run does not have
(it started on fewer hosts) is left as it is: not loaded, not deleted, until a shard of that name comes back. The
shards write and read there themselves, so their workers must see the experiment directory (one host, or a shared
file system).
"""

from __future__ import annotations

import os

from daskrl.driver.loop.observers import Observer, Run
from daskrl.errors import ComponentError
from daskrl.runtime.actors.handles import ComponentHandle

#: seconds a shard may take to write or read its file (a full Atari shard is gigabytes)
SAVE_TIMEOUT_S = 600


class ReplayCheckpoints(Observer):
    def _dir(self, run: Run) -> str:
        return os.path.join(run.config.experiment_dir, "replay")

    def _path(self, run: Run, shard: str) -> str:
        return os.path.join(self._dir(run), f"{shard}.npz")

    def on_start(self, run: Run) -> None:
        if not run.config.run.resume:
            return
        run.fleet.replay.on_added.append(lambda shard: self._load(run, [shard]))
        self._load(run, run.fleet.replay.shards)
        present = {f"{shard.name}.npz" for shard in run.fleet.replay.shards}
        waiting = sorted(f for f in os.listdir(self._dir(run)) if f.endswith(".npz") and f not in present) \
            if os.path.isdir(self._dir(run)) else []
        if waiting:
            run.say(f"daskrl: replay files kept for shards this run does not have (yet): {', '.join(waiting)}; a "
                    "shard of that name added later (a host that joins) loads its file")

    def _load(self, run: Run, shards: list[ComponentHandle]) -> None:
        loaded = {shard.name: shard.call("load", self._path(run, shard.name), timeout=SAVE_TIMEOUT_S)
                  for shard in shards}
        if any(loaded.values()):
            run.say("daskrl: replay refilled from the experiment: "
                    + ", ".join(f"{name} {n:,} transitions" for name, n in loaded.items()))

    def on_checkpoint(self, run: Run, env_steps: int) -> None:
        for shard in run.fleet.replay.shards:
            try:
                shard.call("save", self._path(run, shard.name), timeout=SAVE_TIMEOUT_S)
            except ComponentError as exc:  # a shard lost meanwhile: it comes back empty, its last file stays
                run.warn(f"{shard.name} did not save its transitions: {exc}")
