"""Datasets: ``daskrl record`` plays a trained policy on the fleet's rollout workers into a Minari dataset
(:mod:`.record_command`); ``daskrl train --record-dataset`` records what a training run samples
(:mod:`daskrl.sampling.slots.episode_recorder` on the rollout workers, :mod:`daskrl.monitor.outputs.dataset_file` in
the driver)."""
