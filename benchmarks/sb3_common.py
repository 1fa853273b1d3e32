"""What the Stable-Baselines3 runs of bench_train.py share: stopping at a mean return, rl-zoo's linear schedules.

Imported by sb3_cartpole.py and sb3_recurrent_cartpole.py after they note their start time, so the import of
Stable-Baselines3 counts in the time to the threshold, as daskrl's start-up does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from stable_baselines3.common.callbacks import BaseCallback


class StopAt(BaseCallback):
    """Stops training once the last 100 episodes average ``threshold``; ``reached_at`` is then the seconds since
    ``t0`` (the script's start)."""

    def __init__(self, threshold: float, t0: float) -> None:
        super().__init__()
        self.threshold, self.t0 = threshold, t0
        self.reached_at: float | None = None

    def _on_step(self) -> bool:
        buf = self.model.ep_info_buffer
        if len(buf) >= 100 and sum(e["r"] for e in buf) / len(buf) >= self.threshold:
            self.reached_at = time.time() - self.t0
            print(f"reached {self.threshold:g}", flush=True)
            return False
        return True


def linear(start: float) -> Callable[[float], float]:
    """rl-zoo's ``lin_<start>``: from ``start`` down to 0 over the run (SB3 passes the progress remaining)."""
    return lambda progress: progress * start
