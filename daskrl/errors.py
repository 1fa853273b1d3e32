"""Every error daskrl raises on purpose, in one place: each names what went wrong and how to fix it.

All derive from :class:`DaskRLError`, so ``except DaskRLError`` tells a problem daskrl explains from a bug. They
keep the built-in base a caller would expect (a bad value is a ``ValueError``, a bad payload a ``TypeError``) and
pickle with their fields, because Dask carries them from worker processes back to the driver.
"""

from __future__ import annotations


class DaskRLError(RuntimeError):
    """Base class of every error daskrl raises on purpose (as opposed to a bug)."""


class ConfigError(DaskRLError, ValueError):
    """Bad configuration values; ``problems`` holds one readable line each (one problem: one line in all)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(f"invalid configuration: {self.problems[0]}")
        else:
            super().__init__("invalid configuration:\n  " + "\n  ".join(self.problems))

    def __reduce__(self):
        return type(self), (self.problems,)


class EnvError(DaskRLError, ValueError):
    """A problem with an env spec or its spaces, with a message that says how to fix it."""


class EnvStepError(DaskRLError):
    """An env raised inside reset/step; says which env and where, in one line."""

    def __init__(self, env_index: int, phase: str, summary: str) -> None:
        super().__init__(f"env {env_index} raised in {phase}: {summary}")
        self.env_index = env_index
        self.phase = phase
        self.summary = summary

    def __reduce__(self):
        return type(self), (self.env_index, self.phase, self.summary)


class TrainingError(DaskRLError):
    """A run that could not go on (a component failed); the message names it and the cause."""


class ClusterAccessError(DaskRLError):
    """The cluster could not be reached or refused this client (TLS credentials missing or not trusted...)."""


class ConnectError(DaskRLError, ValueError):
    """A signal or slot that does not exist, or a component that is not running."""


class UnknownMemberError(ConnectError, AttributeError):
    """``handle.name`` where the component class has no such signal or slot."""


class PayloadError(DaskRLError, TypeError):
    """A signal payload that cannot travel over the topic bus (not msgpack-native)."""


class ComponentError(DaskRLError):
    """A component failed, died or did not answer a control call in time."""


class SharedMemoryError(DaskRLError):
    """A shared-memory segment could not be created or attached."""


class ExperimentInUseError(DaskRLError):
    """Another live run owns the experiment directory."""


class RequestError(DaskRLError, ValueError):
    """A request a served policy cannot answer (observations of the wrong shape, a body that is not JSON...), in
    one line that says what the policy takes; the server answers it with HTTP 400 and goes on serving."""


class ExportError(DaskRLError):
    """A trained policy that could not be written to the format asked for, or whose file computes otherwise."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line for a message (``Type: text``, whitespace folded, at most ``limit`` characters)."""
    cause = " ".join(f"{type(exc).__name__}: {exc}".split())
    return cause if len(cause) <= limit else cause[:limit] + " ..."


class GroupBroken(RuntimeError):
    """A learner group's collective failed or timed out: a member is gone. The learner stops training with the group
    until the runner forms it again."""
