"""Train on an image-observation env (84x84 frames, a CNN policy): daskrl/Catch-v0, a ball to catch.

    python examples/image_env.py

The same options are available on the command line:
    daskrl train --env daskrl/Catch-v0 --num-envs-per-worker 16 --learning-rate 0.0005 ...
"""

import daskrl

if __name__ == "__main__":
    config = daskrl.Config()
    config.env.env = "daskrl/Catch-v0"
    config.sampler.num_envs_per_worker = 16
    config.sampler.rollout = 32
    config.learner.batch_size = 256
    config.learner.num_batches_per_epoch = 4
    config.learner.num_epochs = 2  # a small batch: two passes over it
    config.learner.learning_rate = 5e-4
    config.run.experiment = "catch_example"
    config.run.stop_at_return = 0.8  # +1 per catch, -1 per miss
    config.run.train_for_seconds = 300
    summary = daskrl.train(config)
    print(f"mean return {summary['episode_return_mean']:.2f} after {summary['env_steps']:,} env steps")
