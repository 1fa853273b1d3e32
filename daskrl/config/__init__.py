"""Configuration: every option defined once (:mod:`.options`), the checks of one value (:mod:`.checks`) and of options
that must fit together (:mod:`.rules`), all of them as one :class:`Config` (:mod:`.configuration`), and the defaults
of env families (:mod:`.env_defaults`). ``from daskrl.config import Config`` is the public path."""

from daskrl.config.algo_options import AlgoConfig
from daskrl.config.checks import check_field, flag
from daskrl.config.configuration import Config
from daskrl.config.options import (
    DEVICE_PATTERN,
    INFERENCE_PRECISIONS,
    MAX_ENVS_PER_WORKER,
    MAX_ROLLOUT_WORKERS,
    RECURRENT_MINIBATCH_TARGETS,
    SECTIONS,
    TARGETS_FROM,
    EnvConfig,
    LearnerConfig,
    ModelConfig,
    PolicyConfig,
    RunConfig,
    SamplerConfig,
    Section,
    opt,
)
from daskrl.errors import ConfigError

__all__ = ["AlgoConfig", "DEVICE_PATTERN", "INFERENCE_PRECISIONS", "MAX_ENVS_PER_WORKER", "MAX_ROLLOUT_WORKERS",
           "RECURRENT_MINIBATCH_TARGETS", "SECTIONS", "TARGETS_FROM", "Config", "ConfigError", "EnvConfig",
           "LearnerConfig", "ModelConfig", "PolicyConfig", "RunConfig", "SamplerConfig", "Section", "check_field", "flag",
           "opt"]
