"""Train CartPole-v1 from Python on the embedded cluster, then evaluate the result.

    python examples/train_cartpole.py
"""

import daskrl
from daskrl.evaluation import enjoy

if __name__ == "__main__":  # worker processes are started fresh: keep the guard
    config = daskrl.Config()
    config.env.env = "CartPole-v1"
    config.run.experiment = "cartpole_example"
    config.run.stop_at_return = 475
    config.run.train_for_seconds = 120
    summary = daskrl.train(config)
    print(f"mean return {summary['episode_return_mean']:.1f} after {summary['env_steps']:,} env steps")
    result = enjoy(summary["experiment_dir"], episodes=10)
    print(f"evaluation: {result['return_mean']:.1f} ± {result['return_std']:.1f}")
