"""The learner of a replay: the run's model and trainer, built as its learner built them, fed the recorded batches.

It keeps the weights of every policy version a split may still act with (as the run's learner published them), and
trains each step as the run's learner did with --record-schedule: the minibatch order seeded from the run's seed
and the step's number, on the CPU, with the same number of threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskrl.learning.learner import seed_step
from daskrl.learning.learner_base import build_learning
from daskrl.learning.slot_reader import SlotReader, reader_for
from daskrl.learning.training_state import export_state
from daskrl.setups import LearnerSetup


class ScheduledLearner:
    """See the module docstring. ``first_version``: the version the run's learner published before its first step."""

    def __init__(self, setup: LearnerSetup, first_version: int) -> None:
        import torch

        from daskrl.models.inputs.activations import pin_standard_tanh

        pin_standard_tanh()  # as the run's learner did, before the model and its kernels are built
        torch.set_num_threads(setup.learner.learner_threads)
        self.setup = setup
        self.device = torch.device("cpu")  # where the recorded learner trained (a replay refuses another device)
        self.model, self.trainer = build_learning(setup, self.device)
        self.reader: SlotReader = reader_for(setup.policy_index, setup.tagged, setup.cut, self.model.recurrent)
        self.version = first_version
        self.weights: dict[int, dict[str, np.ndarray]] = {first_version: self.model.state_dict_numpy()}

    def weights_of(self, version: int) -> dict[str, np.ndarray]:
        try:
            return self.weights[version]
        except KeyError:
            raise RuntimeError(f"a recorded fill acted with policy version {version}, which this replay has "
                               f"{'not reached' if version > self.version else 'dropped'} (at version "
                               f"{self.version}): the schedule is inconsistent") from None

    def train(self, parts: list[dict[str, np.ndarray]], hyperparams: dict[str, float] | None = None
              ) -> dict[str, float]:
        """One training step on these slots joined in this order (with ``hyperparams`` set first, where the run
        changed them); publishes the next version. Its metrics."""
        import torch

        if hyperparams is not None:
            self.trainer.set_hyperparams(hyperparams)
        batch = self.reader.join(parts)
        torch.set_num_threads(self.setup.learner.learner_threads)  # a sampler's torch model may have set 1
        seed_step(self.setup.seed, self.trainer.train_steps)
        acted_with = self.version
        metrics = self.trainer.train(batch, acted_with, self.trainer.samples_trained)
        self.version += 1
        self.weights[self.version] = self.model.state_dict_numpy()
        metrics["version_diff"] = float(acted_with - batch.policy_version.mean())
        return metrics

    def forget_before(self, version: int) -> None:
        """No split acts with a version older than ``version`` any more."""
        for old in [v for v in self.weights if v < version]:
            del self.weights[old]

    def state(self) -> dict[str, Any]:
        """The training state as a checkpoint holds it."""
        state = export_state(self.trainer, self.version)
        state["env_steps"] = int(self.trainer.samples_trained)
        return state
