"""Where a (re)started learner begins: a checkpoint's whole training state, weights alone, or its initial weights."""

from __future__ import annotations

from dataclasses import dataclass

from daskrl.runtime.actors.handles import ComponentHandle

#: seconds a learner may take to load a checkpoint or weights
LOAD_TIMEOUT_S = 120


@dataclass(frozen=True)
class LearnerStart:
    """Where a learner starts: a checkpoint's whole training state, weights alone (``--init-checkpoint``, or what
    a lost learner published last), or its initial weights (``method`` None)."""

    method: str | None = None
    args: tuple = ()

    @classmethod
    def from_checkpoint(cls, state: dict) -> LearnerStart:
        return cls("load_state", (state, int(state.get("env_steps", 0))))

    @classmethod
    def from_checkpoint_bytes(cls, data: bytes) -> LearnerStart:
        """A checkpoint's state as the learner serialized it (the driver does not load it: no torch here)."""
        return cls("load_checkpoint_bytes", (data,))

    @classmethod
    def from_weights(cls, weights: dict, env_steps: int = 0) -> LearnerStart:
        """``weights``: ``{"version", "weights"}``; the learner goes on from ``env_steps``."""
        return cls("load_weights", (weights["version"], weights["weights"], env_steps))

    @property
    def weights(self) -> dict | None:
        """The ``{"version", "weights"}`` a start from weights alone loads (None for the other starts)."""
        return {"version": self.args[0], "weights": self.args[1]} if self.method == "load_weights" else None

    def apply(self, learner: ComponentHandle) -> None:
        if self.method is not None:
            learner.call(self.method, *self.args, timeout=LOAD_TIMEOUT_S)
