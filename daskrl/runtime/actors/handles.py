"""The driver's side of components: creating them on chosen workers, and calling them with timeouts.

:func:`spawn_all` creates components as Dask actors (``pure=False``, pinned to a worker) and configures them at
the same time; :class:`ComponentHandle` calls their control methods, always with a timeout (an actor call to a
dead worker can otherwise hang), and names their signals and slots for :mod:`daskrl.runtime.messaging.wiring`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any

from daskrl.errors import ComponentError, UnknownMemberError
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.signals import Signal, SignalRef, SlotRef, is_slot, scoped_name, signals_of, slots_of


class ComponentHandle:
    """The driver's view of a component: control calls with timeouts, and signal/slot references."""

    def __init__(self, name: str, cls: type, actor: Any, address: str, client: Any, scope: str = "") -> None:
        """``name``: the component's own; ``scope``: its run's (its name on the bus is :attr:`bus_name`)."""
        self.name, self.cls, self.actor, self.address, self.client = name, cls, actor, address, client
        self.scope = scope
        self.bus_name = scoped_name(scope, name)

    def __getattr__(self, item: str) -> SignalRef | SlotRef:
        if item.startswith("_"):
            raise AttributeError(item)
        attr = getattr(self.cls, item, None)
        if isinstance(attr, Signal):
            return SignalRef(self.bus_name, item, self.cls)
        if is_slot(attr):
            return SlotRef(self.bus_name, item, self.cls)
        raise UnknownMemberError(
            f"component {self.name!r} ({self.cls.__name__}) has no signal or slot {item!r}; its signals are: "
            f"{', '.join(signals_of(self.cls)) or 'none'}; its slots are: {', '.join(slots_of(self.cls)) or 'none'}"
            f" (for control methods use handle.call({item!r}, ...))"
        )

    def call(self, method: str, *args: Any, timeout: float = 60.0, **kwargs: Any) -> Any:
        """Call a control method and wait at most ``timeout`` seconds; errors name the component."""
        return self.wait(method, self.send(method, *args, **kwargs), timeout)

    def send(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Start a control call without waiting for it; pass the returned future to :meth:`wait`."""
        try:
            return getattr(self.actor, method)(*args, **kwargs)
        except Exception as exc:
            raise self._failed(method, exc) from exc

    def wait(self, method: str, future: Any, timeout: float = 60.0) -> Any:
        """The result of a call started with :meth:`send`, within ``timeout`` seconds."""
        try:
            return future.result(timeout=timeout)
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise ComponentError(
                f"component {self.name!r} ({self.cls.__name__} on {self.address}) did not answer "
                f"{method}() within {timeout} s"
            ) from exc
        except ComponentError:
            raise
        except Exception as exc:
            raise self._failed(method, exc) from exc

    def _failed(self, method: str, exc: Exception) -> ComponentError:
        return ComponentError(f"component {self.name!r} ({self.cls.__name__} on {self.address}): {method}() failed: "
                              f"{type(exc).__name__}: {exc}")

    def __repr__(self) -> str:
        return f"<ComponentHandle {self.name!r} {self.cls.__name__} on {self.address}>"


def call_each(handles: Sequence[ComponentHandle], method: str, *args: Any, warn: Callable[[str], None]) -> None:
    """Call ``method`` on each component; one that fails (lost at the same time: the recovery recreates it with what
    it needs) is told about through ``warn``, and the others still get the call."""
    for handle in handles:
        try:
            handle.call(method, *args)
        except ComponentError as exc:
            warn(f"{handle.name} did not take {method}(): {exc}")


def spawn(client: Any, cls: type, name: str, *, run_id: str, worker: str | None = None, setup: Any = None,
          timeout: float = 120.0) -> ComponentHandle:
    """Create component ``cls(name)`` as an actor on ``worker`` (an address; any worker if None) and configure it
    with ``setup``. ``run_id`` names its shared-memory segments. Returns its :class:`ComponentHandle`."""
    return spawn_all(client, [(cls, name, worker, setup)], run_id=run_id, timeout=timeout)[0]


def spawn_all(client: Any, specs: list[tuple[type, str, str | None, Any]], *, run_id: str, timeout: float = 120.0,
              created: list[ComponentHandle] | None = None) -> list[ComponentHandle]:
    """Create components from ``(cls, name, worker, setup)`` specs, then configure them all at once.

    Why at once: configuring builds a component's envs, and each runs on its own worker: rollout workers building
    many envs each take as long together as one alone. Each handle is appended to ``created`` as soon as its actor
    exists, so a caller can stop the ones made before a failure.
    """
    actors = []
    for cls, name, worker, _ in specs:
        kwargs: dict[str, Any] = {"actor": True, "pure": False, "key": f"daskrl-{name}-{os.urandom(4).hex()}"}
        if worker is not None:
            kwargs.update(workers=[worker], allow_other_workers=False)
        actors.append(client.submit(cls, name, run_id, **kwargs))
    handles = []
    for (cls, name, _, _), future in zip(specs, actors, strict=True):
        try:
            actor = future.result(timeout=timeout)
        except Exception as exc:
            raise ComponentError(f"could not create component {name!r} ({cls.__name__}): "
                                 f"{type(exc).__name__}: {exc}") from exc
        handles.append(ComponentHandle(name, cls, actor, dask_internals.actor_address(actor), client, run_id))
        if created is not None:
            created.append(handles[-1])
    pending = [handle.send("configure", run_id, setup) for handle, (_, _, _, setup) in zip(handles, specs, strict=True)]
    for handle, future in zip(handles, pending, strict=True):
        handle.wait("configure", future, timeout)
    return handles


def stop_all(handles: Sequence[ComponentHandle], release: bool = True, timeout: float = 30.0) -> list[dict]:
    """Stop these components all at once: each ends its thread and closes its envs in its own process, so they take
    the slowest one's time, not their sum. Returns each one's final stats, or ``{"name", "error"}`` for one that
    could not be stopped (already gone), so the rest are still stopped. ``release=False``: see :func:`release_all`."""
    started: list[tuple[ComponentHandle, Any]] = []
    for handle in handles:
        try:
            started.append((handle, handle.send("stop", release=release)))
        except ComponentError as exc:
            started.append((handle, exc))
    out = []
    for handle, call in started:
        try:
            if isinstance(call, ComponentError):
                raise call
            out.append(handle.wait("stop", call, timeout))
        except ComponentError as exc:
            out.append({"name": handle.name, "error": str(exc)})
    return out


def release_all(handles: Sequence[ComponentHandle]) -> None:
    """Free the shared memory of components stopped with ``release=False`` (samplers whose last slots learners on
    other hosts were still reading); one already gone freed it at its teardown."""
    for handle in handles:
        try:
            handle.call("release", timeout=30)
        except ComponentError:
            pass


def looks_like_a_lost_worker(exc: BaseException) -> bool:
    """Whether a failed call may come from a worker that left the cluster: ``exc`` or one of its causes is a failed
    connection (Dask's "OSError: Unable to contact Actor's worker"), a call that timed out, or a task cancelled or
    given up by the scheduler. An exception the component raised itself came back from a worker that answered."""
    from concurrent.futures import CancelledError

    from distributed.scheduler import KilledWorker

    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, (OSError, TimeoutError, CancelledError, KilledWorker)):
            return True
        cause = cause.__cause__
    return False
