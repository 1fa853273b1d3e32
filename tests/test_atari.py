"""The Atari family's training defaults, and the envpool backend against the gymnasium path."""

from __future__ import annotations

from daskrl.cli import _config_from_args, build_parser
from daskrl.config import Config
from daskrl.env_defaults import apply_env_defaults, describe, family_of

# ---- the Atari family: defaults sized for a 2-core CPU ----


def test_every_atari_game_gets_the_atari_family_and_it_is_printed():
    family = family_of("atari/Pong")
    assert family is not None and family.name == "Atari" and family_of("atari/Breakout") is family
    assert family_of("Pong-v5") is None  # a gymnasium id without the atari/ wrappers is not this family
    line = describe(Config().replace(env="atari/Breakout"))
    assert line.startswith("defaults for Atari envs:") and "--batch-size 256" in line and "--num-workers 1" in line


def test_the_atari_family_sizes_a_training_step_the_cpu_learner_keeps_up_with():
    config = Config().replace(env="atari/Pong")
    applied = apply_env_defaults(config)
    lrn = config.learner
    # 1,024 samples a step in one pass (the global defaults' 4,096 took a CPU learner several seconds a step)
    assert lrn.batch_size * lrn.num_batches_per_epoch * lrn.num_epochs == 1024
    assert config.sampler.num_workers == 1 and lrn.learner_threads == 1  # a core for sampling, a core for learning
    assert lrn.reward_clip == 1.0 and lrn.entropy_coef == 0.01 and lrn.clip_ratio == 0.1
    assert applied == family_of("atari/Pong").options
    config.validate()


def test_flags_given_on_the_command_line_win_over_the_atari_family():
    args = build_parser().parse_args(["train", "--env", "atari/Pong", "--batch-size", "512", "--num-workers", "2",
                                      "--reward-clip", "0"])
    config = _config_from_args(args)
    applied = apply_env_defaults(config)
    assert config.learner.batch_size == 512 and config.sampler.num_workers == 2 and config.learner.reward_clip == 0
    assert not {"batch_size", "num_workers", "reward_clip"} & set(applied)
    assert config.learner.num_batches_per_epoch == 4 and config.learner.learning_rate == 2.5e-4  # the rest applies
    assert "--batch-size" not in describe(config) and "--clip-ratio 0.1" in describe(config)
    plain = _config_from_args(build_parser().parse_args(["train", "--env", "atari/Pong", "--no-env-defaults"]))
    assert apply_env_defaults(plain) == {} and plain.learner.batch_size == Config().learner.batch_size


def test_a_sampling_only_run_keeps_every_rollout_worker_the_family_gave_to_the_learner():
    """The family's single rollout worker leaves a core to the learner; `daskrl sample` has no learner, so it keeps
    the global worker count (and so measures the sampler's ceiling)."""
    config = Config().replace(env="atari/Breakout", sampling_only=True)
    applied = apply_env_defaults(config)
    assert "num_workers" not in applied and config.sampler.num_workers == Config().sampler.num_workers
    assert config.learner.batch_size == 256  # the rest of the family still applies
