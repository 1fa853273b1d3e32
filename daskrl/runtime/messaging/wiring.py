"""Wiring components together through the scheduler's bus registry: signals to slots, and work queues.

- :func:`connect` delivers a signal to a slot from now on (broadcast: every connected slot gets every payload);
- :func:`add_consumer` makes a slot one of the takers of a work queue (each item goes to exactly one of them,
  round-robin from each sender, over the same FIFO peer streams as signals). Producers call
  ``component.put(queue, payload)``.

Both are in force everywhere when they return: the registry pushes the new routing table to every worker and
waits for all of them. They work from the driver (pass the client) and from inside a component (pass nothing).
"""

from __future__ import annotations

from typing import Any

from daskrl.errors import ConnectError
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.signals import SignalRef, SlotRef, scoped_name


def queue_topic(queue: str, scope: str = "") -> str:
    """The bus topic of work queue ``queue`` of one run (``scope``: its components' scope)."""
    return f"queue:{scoped_name(scope, queue)}"


async def registry_request(worker: Any, op: str, **kwargs: Any) -> dict:
    """Call a bus-registry handler on the scheduler from a worker's event loop."""
    return await getattr(worker.scheduler, op)(**kwargs)


def registry_call(client: Any, op: str, **kwargs: Any) -> dict:
    """Call a bus-registry handler on the scheduler: from the driver (``client``) or, with ``client=None``, from
    a thread of a worker (a component's own thread)."""
    client = _client_or_none(client)
    if client is not None:
        return client.sync(getattr(client.scheduler, op), **kwargs)
    from distributed import get_worker

    worker = get_worker()
    return dask_internals.run_sync(worker.loop, registry_request, worker, op, **kwargs)


def connect(sender: SignalRef, receiver: SlotRef, client: Any = None) -> None:
    """Deliver ``sender``'s signal to ``receiver``'s slot from now on (in force everywhere on return)."""
    _subscribe(client, topic=sender.topic, receiver=receiver, mode="broadcast", sender=sender.component,
               signal=sender.signal)


def disconnect(sender: SignalRef, receiver: SlotRef, client: Any = None) -> None:
    registry_call(client, "daskrl_unsubscribe", topic=sender.topic, receiver=receiver.component, slot=receiver.slot)


def add_consumer(queue: str, consumer: SlotRef, client: Any = None) -> None:
    """Make ``consumer`` (a slot) one of the takers of work queue ``queue``; in force everywhere on return."""
    _subscribe(client, topic=queue_topic(queue, consumer.scope), receiver=consumer, mode="one")


def remove_consumer(queue: str, consumer: SlotRef, client: Any = None) -> None:
    registry_call(client, "daskrl_unsubscribe", topic=queue_topic(queue, consumer.scope), receiver=consumer.component,
                  slot=consumer.slot)


def _subscribe(client: Any, topic: str, receiver: SlotRef, mode: str, **sender: Any) -> None:
    reply = registry_call(client, "daskrl_subscribe", topic=topic, receiver=receiver.component, slot=receiver.slot,
                          mode=mode, **sender)
    if reply["status"] != "ok":
        raise ConnectError(reply["message"])


def _client_or_none(client: Any) -> Any:
    """The client for registry calls: the given one; None inside a worker; else this process's default client."""
    if client is not None:
        return client
    from distributed import default_client, get_worker

    try:
        get_worker()
        return None
    except ValueError:
        return default_client()
