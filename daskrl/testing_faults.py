"""The fault-drill envs under the name that env specs use (``--env daskrl.testing_faults:flaky``); they live in
:mod:`daskrl.testing.faults`."""

from daskrl.testing.faults import (
    AlwaysFailingEnv,
    FaultInjected,
    FlakyEnv,
    HangingEnv,
    MissingResourceError,
    NanRewardEnv,
    always_failing,
    broken_on_workers,
    flaky,
    hanging,
    kills_its_worker_once,
    nan_reward,
)

__all__ = ["AlwaysFailingEnv", "FaultInjected", "FlakyEnv", "HangingEnv", "MissingResourceError", "NanRewardEnv",
           "always_failing", "broken_on_workers", "flaky", "hanging", "kills_its_worker_once", "nan_reward"]
