"""``--online-after N``: an off-policy run that trains from its dataset alone first, then samples.

Offline-to-online fine-tuning (as in IQL's and Cal-QL's experiments) starts from a policy and critics that the dataset
taught, then lets them act. The run's samplers are created and wired at the start like any run's, but held back
(:attr:`~daskrl.driver.fleet.sampler_team.Samplers.held`), and its replay shards serve every minibatch from their
part of the dataset as fast as the learner asks. Once the learner has made ``N`` updates, this observer switches the
shards to the update-to-data ratio with ``--dataset-fraction`` of each minibatch from the dataset (RLPD's symmetric
sampling, counting only the draws served from then on) and starts the samplers. A resumed run past ``N`` switches at
its first poll.
"""

from __future__ import annotations

from typing import Any

from daskrl.driver.loop.observers import Observer, Run


class OnlineSwitch(Observer):
    """See the module docstring."""

    def __init__(self) -> None:
        self.switched_at: int | None = None  # the learner's updates when sampling started

    def on_poll(self, run: Run) -> None:
        after = run.config.algo.online_after
        if self.switched_at is not None or run.state.updates < after:
            return
        run.fleet.replay.go_online()
        run.fleet.samplers.release()
        self.switched_at = run.state.updates
        run.say(f"daskrl: {self.switched_at:,} updates from the dataset alone (--online-after {after:,}): the "
                f"rollout workers start sampling, and {run.config.algo.dataset_fraction:g} of each minibatch comes "
                "from the dataset from now on")

    def summary(self) -> dict[str, Any]:
        return {"online_after_updates": self.switched_at}
