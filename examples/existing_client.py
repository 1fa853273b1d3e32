"""Use a Dask cluster you already have: pass its `distributed.Client` (or `--scheduler tcp://host:8786`).

    python examples/existing_client.py

Here the cluster is a LocalCluster made by this script, standing in for one started with `dask scheduler` and
`dask worker`. daskrl places one busy component per worker process and never closes a cluster it did not open.
"""

from distributed import Client, LocalCluster

import daskrl

if __name__ == "__main__":
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True) as cluster, \
            Client(cluster, direct_to_workers=True) as client:
        config = daskrl.Config()
        config.env.env = "CartPole-v1"
        config.run.experiment = "existing_client_example"
        config.run.stop_at_return = 450
        config.run.train_for_seconds = 120
        summary = daskrl.train(config, client=client)
        print(f"mean return {summary['episode_return_mean']:.1f}; the cluster still runs: "
              f"{len(client.nthreads())} workers")
