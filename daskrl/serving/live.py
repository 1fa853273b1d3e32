"""Where a served policy's weights come from: a checkpoint (fixed), or a live run's newest published version.

A run's learner publishes each version in its parameter block (:mod:`daskrl.runtime.memory.params`), and the run's driver
tells the cluster's run registry where that block is at every beat. :class:`LiveWeights` reads the block before
each forward pass (one integer read when nothing changed), so a new version is taken between two passes and never
splits one. Every few seconds it asks the registry again: a learner recreated after a fault publishes in a new
block, which is followed from its first version on (a learner restarted from a checkpoint may count from a lower
version than the one served before). When the run ends, the last version taken goes on being served.
"""

from __future__ import annotations

import time
from typing import Any

from daskrl.errors import ClusterAccessError, ComponentError
from daskrl.runtime.access.runs import run_params
from daskrl.runtime.actors.component import Component
from daskrl.runtime.memory.params import ParameterReader
from daskrl.serving.policy import ServedPolicy


class FixedWeights:
    """A checkpoint's weights: nothing newer ever comes."""

    def refresh(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {}


class LiveWeights:
    """Run ``run``'s newest weights of policy ``index`` for ``policy`` (see the module docstring)."""

    #: seconds between two looks at the run registry for a new parameter block
    recheck_s = 2.0

    def __init__(self, component: Component, run: str, index: int, desc: dict, policy: ServedPolicy) -> None:
        self.component, self.run, self.index, self.policy = component, run, index, policy
        self.desc = desc
        self.reader = ParameterReader(component, desc)
        self.taken = 0  # the version of this block last taken (-1: none yet from a new block)
        self.state = "live"
        self.blocks = 1
        self._next_check = time.monotonic() + self.recheck_s

    def first(self, timeout: float = 30.0) -> None:
        """Take the version published now (a learner publishes its first as it starts); raises when none comes."""
        deadline = time.monotonic() + timeout
        while self.policy.version <= 0:
            self.refresh()
            if time.monotonic() > deadline:
                raise ComponentError(f"run {self.run!r} published no parameters within {timeout:.0f} s")
            time.sleep(0.05)

    def refresh(self) -> None:
        """Take a newer version if one was published (between two passes). A block that cannot be read now (its
        writer died mid-publish) leaves the version served as it is: the server never stops answering for it."""
        try:
            got = self.reader.newer_than(self.taken)
        except Exception as exc:
            self.component.incidents.note("params-read-failed", exc)
            got = None
        if got is not None:
            self.taken, weights = got
            self.policy.load(self.taken, weights)
        if time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + self.recheck_s
            self._recheck()

    def _recheck(self) -> None:
        try:
            params = run_params(None, self.run)["params"]
        except ClusterAccessError as exc:  # the run ended: its last version stays
            if self.state == "live":
                self.component.incidents.note("followed-run-ended", exc)
            self.state = "ended"
            return
        except Exception as exc:  # the scheduler did not answer this time: asked again at the next check
            self.component.incidents.note("run-registry-unreachable", exc)
            return
        desc = params[self.index] if self.index < len(params) else None
        if desc is not None and desc["data"]["name"] != self.desc["data"]["name"]:  # a recreated learner's block
            self.desc, self.reader, self.taken = desc, ParameterReader(self.component, desc), -1
            self.blocks += 1

    def stats(self) -> dict[str, Any]:
        return {"follow": {"run": self.run, "state": self.state, "parameter_blocks": self.blocks}}
