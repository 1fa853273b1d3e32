"""What a task is like, measured before a run starts, for the env families' rules (daskrl/config/env_defaults.py):
a family derives a setting from a property of the task rather than from its name, so an unseen task with the same
property gets the same setting.

The profile is plain data; :func:`daskrl.envs.task_probe.profile_task` measures it by playing uniformly random
actions for a few thousand steps on the driver (vector observations only: a probe of an image env would cost more
than it tells).
"""

from __future__ import annotations

from dataclasses import dataclass

#: a task "falls at once" when random actions end most episodes by termination within this share of the time
#: limit: Hopper and Walker2d fall after about 2% of their 1,000 steps, Ant after 15% (measured, 2026-11-29)
FALLS_AT_ONCE_SHARE = 0.05


@dataclass(frozen=True)
class TaskProfile:
    horizon: int | None  # the time limit (spec.max_episode_steps), None: none
    random_length: float  # the mean length of an episode of uniformly random actions
    terminated_share: float  # the share of those episodes that ended by termination (not the time limit)

    @property
    def falls_at_once(self) -> bool:
        """Random actions end the episode by termination almost at once (a body that falls, a pole that drops): a
        policy that only stays up collects the per-step reward for staying alive, which a narrow initial policy
        settles on (docs/training.md, "Rules over recipes")."""
        return (self.horizon is not None and self.terminated_share > 0.5
                and self.random_length < FALLS_AT_ONCE_SHARE * self.horizon)
