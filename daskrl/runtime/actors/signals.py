"""Signals and slots: how a component declares what it emits and what it takes.

``@signal`` declares a signal; calling it on an instance publishes the payload on the topic bus
(``self.trajectory_ready({...})``). ``@slot`` marks a method that signals and work queues may deliver to; it runs
on the component's own thread with the payload as its only argument. On the driver, ``handle.some_signal`` and
``handle.some_slot`` give :class:`SignalRef` / :class:`SlotRef`, which :mod:`daskrl.runtime.messaging.wiring` connects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daskrl.errors import ConnectError


def signal_topic(bus_name: str, signal: str) -> str:
    """The bus topic signal ``signal`` of the component named ``bus_name`` on the bus is published on: what the
    component's emits, the driver's connections and anything that publishes or listens directly all spell it here."""
    return f"{bus_name}.{signal}"


class Signal:
    """Class attribute made by ``@signal``; on an instance it is a callable that publishes the payload."""

    def __init__(self, fn: Callable) -> None:
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            return self
        topic = signal_topic(instance.bus_name, self.name)
        where = f"component {instance.name!r} signal {self.name!r}"
        bus = instance.bus

        def emit(payload: Any = None) -> int:
            return bus.publish(topic, payload, where)

        return emit


def scoped_name(scope: str, name: str) -> str:
    """A component's name on the bus: its run's scope and its own name (``<run id>/rollout_0``), so that runs sharing
    a cluster never take each other's signals, slots or queues; no scope: the name alone."""
    return f"{scope}/{name}" if scope else name


def scope_of(bus_name: str) -> str:
    """The scope of a name on the bus ('' for an unscoped one)."""
    return bus_name.rpartition("/")[0]


def signal(fn: Callable) -> Signal:
    """Declare a signal. The decorated function's body is never run; its signature documents the payload."""
    return Signal(fn)


def slot(fn: Callable) -> Callable:
    """Mark a method as a slot: it may be connected to signals and work queues, and runs on the component's
    own thread with the payload as its only argument."""
    fn._daskrl_slot = True
    return fn


def is_slot(attr: Any) -> bool:
    return bool(getattr(attr, "_daskrl_slot", False))


def signals_of(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if isinstance(getattr(cls, n, None), Signal))


def slots_of(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if is_slot(getattr(cls, n, None)))


class SignalRef:
    """``handle.some_signal`` on the driver: names a signal of a running component."""

    def __init__(self, component: str, signal: str, cls: type | None = None) -> None:
        self.component, self.signal, self.cls = component, signal, cls
        if cls is not None and signal not in signals_of(cls):
            raise ConnectError(
                f"component {component!r} ({cls.__name__}) has no signal {signal!r}; "
                f"its signals are: {', '.join(signals_of(cls)) or 'none'}"
            )

    @property
    def topic(self) -> str:
        return signal_topic(self.component, self.signal)

    @property
    def scope(self) -> str:
        return scope_of(self.component)


class SlotRef:
    """``handle.some_slot`` on the driver: names a slot of a running component."""

    def __init__(self, component: str, slot: str, cls: type | None = None) -> None:
        self.component, self.slot, self.cls = component, slot, cls
        if cls is not None and slot not in slots_of(cls):
            raise ConnectError(
                f"component {component!r} ({cls.__name__}) has no slot {slot!r}; "
                f"its slots are: {', '.join(slots_of(cls)) or 'none'} (mark slot methods with @slot)"
            )

    @property
    def scope(self) -> str:
        """The run the slot's component belongs to: its work queues are that run's."""
        return scope_of(self.component)
