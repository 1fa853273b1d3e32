"""Work queues: requests that exactly one of several consumers must take (inference requests).

A queue is a bus topic in "one" mode: each message goes to exactly one consumer slot, chosen round-robin by
the sending process, over the same FIFO peer streams as signals. Producers call ``component.put(queue, ..)``.
"""

from __future__ import annotations

from daskrl.errors import ConnectError
from daskrl.runtime.component import SlotRef, _driver_client, _scheduler_rpc


def queue_topic(queue: str) -> str:
    return f"queue:{queue}"


def add_consumer(queue: str, consumer: SlotRef, client=None) -> None:
    """Make ``consumer`` (a slot) one of the takers of ``queue``; in force everywhere on return."""
    reply = _scheduler_rpc(
        _driver_client(client), "daskrl_subscribe", topic=queue_topic(queue), receiver=consumer.component,
        slot=consumer.slot, mode="one",
    )
    if reply["status"] != "ok":
        raise ConnectError(reply["message"])


def remove_consumer(queue: str, consumer: SlotRef, client=None) -> None:
    _scheduler_rpc(_driver_client(client), "daskrl_unsubscribe", topic=queue_topic(queue),
                   receiver=consumer.component, slot=consumer.slot)
