"""Errors raised by the runtime: each names the component, signal or segment involved and the fix."""

from __future__ import annotations


class DaskRLError(RuntimeError):
    """Base class of every error daskrl raises on purpose (as opposed to a bug)."""


class ConnectError(DaskRLError, ValueError):
    """A signal or slot that does not exist, or a component that is not running."""


class PayloadError(DaskRLError, TypeError):
    """A signal payload that cannot travel over the topic bus (not msgpack-native)."""


class ComponentError(DaskRLError):
    """A component failed, died or did not answer a control call in time."""


class SharedMemoryError(DaskRLError):
    """A shared-memory segment could not be created or attached."""
