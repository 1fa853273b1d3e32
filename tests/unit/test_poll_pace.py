"""The driver polls every POLL_S, and every NEAR_POLL_S while a stop condition may be met before the next regular
poll: a run stops soon after it reaches its target, and polls rarely otherwise."""

from __future__ import annotations

import time

from daskrl.config import Config
from daskrl.driver.loop.pacing.poll_pace import NEAR_POLL_S, POLL_S, PollPace
from daskrl.monitor.run_state import RunState


def pace_for(**run_options) -> PollPace:
    return PollPace(Config.from_flat({"env": "CartPole-v1", "train_for_env_steps": 0, **run_options}).run)


def state_at(elapsed_s: float, env_steps: int = 0, fps: float = 0.0, returns: list[float] = ()) -> RunState:
    state = RunState(started=time.monotonic() - elapsed_s, env_steps=env_steps)
    state.fps.add(0, now=0.0)
    state.fps.add(int(fps), now=1.0)  # fps frames over one second
    state.episodes.extend([(r, 10) for r in returns])
    return state


def test_a_run_far_from_every_stop_polls_at_the_regular_pace():
    pace = pace_for(train_for_env_steps=600_000, train_for_seconds=60.0, stop_at_return=475)
    assert pace.next_wait(state_at(1.0, env_steps=100_000, fps=100_000, returns=[20.0] * 100)) == POLL_S
    assert pace.next_wait(state_at(1.25, env_steps=125_000, fps=100_000, returns=[25.0] * 100)) == POLL_S


def test_steps_or_seconds_that_would_pass_before_the_next_regular_poll_make_it_poll_sooner():
    steps = pace_for(train_for_env_steps=600_000)
    assert steps.next_wait(state_at(5.0, env_steps=590_000, fps=100_000)) == NEAR_POLL_S  # 10,000 left: 0.1 s
    assert steps.next_wait(state_at(5.0, env_steps=560_000, fps=100_000)) == POLL_S  # 40,000 left: 0.4 s
    seconds = pace_for(train_for_seconds=10.0)
    assert seconds.next_wait(state_at(9.9)) == NEAR_POLL_S
    assert seconds.next_wait(state_at(9.0)) == POLL_S


def test_a_mean_return_rising_towards_the_target_makes_it_poll_sooner_and_a_flat_one_does_not():
    """Target 475: a mean that rose from 200 to 300 over the last quarter of a second could pass 475 before the next
    regular poll if it rose faster still; one that stays at 300 could not; one at the target is caught at once."""
    rising = pace_for(stop_at_return=475)
    assert rising.next_wait(state_at(1.0, returns=[200.0] * 100)) == POLL_S  # no rise known yet
    assert rising.next_wait(state_at(1.25, returns=[300.0] * 100)) == NEAR_POLL_S
    flat = pace_for(stop_at_return=475)
    assert flat.next_wait(state_at(1.0, returns=[300.0] * 100)) == POLL_S
    assert flat.next_wait(state_at(1.25, returns=[300.0] * 100)) == POLL_S
    assert pace_for(stop_at_return=475).next_wait(state_at(1.0, returns=[480.0] * 100)) == NEAR_POLL_S


def test_negative_targets_are_judged_the_same_way():
    """Pendulum's returns are negative: a mean rising from -800 to -700 a quarter second is far from -200; from -300
    to -250 it is near."""
    far = pace_for(stop_at_return=-200)
    far.next_wait(state_at(1.0, returns=[-800.0] * 100))
    assert far.next_wait(state_at(1.25, returns=[-700.0] * 100)) == POLL_S
    near = pace_for(stop_at_return=-200)
    near.next_wait(state_at(1.0, returns=[-300.0] * 100))
    assert near.next_wait(state_at(1.25, returns=[-250.0] * 100)) == NEAR_POLL_S
