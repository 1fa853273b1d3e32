"""The update-to-data ratio of a replay shard, as plain arithmetic: how many draws it may serve now, whether the
learner is behind, and how many minibatches one learner request may carry.

A shard serves no draw before it holds ``learning_starts`` transitions, then one at ``learning_starts`` and
``replay_ratio`` per transition added since. A request asks for up to ``k`` minibatches so that one message round
trip pays for several updates; the shard serves as many as the ratio allows right now (at least one, or it holds the
request), never more: batching requests changes how draws travel, not how many there are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the most minibatches the automatic choice puts in one request: the priorities of a request's later minibatches
#: are drawn before its earlier ones' TD errors come back, so a deep request makes priorities staler
AUTO_MAX_BATCHES = 16


@dataclass(frozen=True)
class ReplayRatio:
    """``replay_ratio`` draws per transition added after the first ``learning_starts`` (at least 1)."""

    learning_starts: int
    replay_ratio: float

    def draws_allowed(self, size: int, added: int, served: int, most: int) -> int:
        """How many of ``most`` further draws may be served now, with ``size`` transitions stored, ``added`` in all
        and ``served`` draws served so far (0: the request waits)."""
        if size < self.learning_starts or most < 1:
            return 0
        limit = 1 + self.replay_ratio * (added - self.learning_starts)  # draw number n is allowed while n < limit
        return max(0, min(most, math.ceil(limit - served)))

    def behind(self, size: int, added: int, served: int) -> bool:
        """Whether fewer draws were served than the ratio asks for the transitions added (never before
        ``learning_starts``): the shard then keeps copied slots so that sampling waits for the learner."""
        if size < self.learning_starts:
            return False
        return served + 1 < self.replay_ratio * (added - self.learning_starts)


@dataclass(frozen=True)
class DatasetOnly:
    """An offline run's shard (:class:`ReplayRatio`'s interface): every draw comes from its part of the dataset,
    whole from the start, and no env step ever adds to it, so it serves what the learner asks for as soon as it
    holds any of the dataset (``dataset_size`` transitions), and nothing is ever held back."""

    dataset_size: int

    def draws_allowed(self, size: int, added: int, served: int, most: int) -> int:
        return max(0, most) if self.dataset_size else 0

    def behind(self, size: int, added: int, served: int) -> bool:
        return False


def batches_per_request(option: int, replay_ratio: float, slot_steps: int) -> int:
    """Minibatches one learner request may carry: ``option`` when given (``--replay-batches-per-request``), else
    (0) the updates one trajectory slot of ``slot_steps`` env steps allows, between 1 and :data:`AUTO_MAX_BATCHES`
    (a slot is the unit a shard's allowance grows by, so a deeper request would mostly come back short)."""
    if option > 0:
        return option
    return max(1, min(AUTO_MAX_BATCHES, math.ceil(replay_ratio * slot_steps)))
