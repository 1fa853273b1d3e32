"""The driver of a run, next to the ``Client``, in four wings:

- :mod:`.launch`: everything up to training begun: the checks before start (preflight, sizing, the network a resume
  builds, the model on the learner's worker), the experiment directory, a cluster deployed for the run, the start-up
  sequence (:mod:`.launch.start`) and the signals that stop it;
- :mod:`.fleet`: who runs what: placement, each role's setup, the live components (``Fleet``), the parameter relays,
  the replay shards' hosts, each policy's books, the algorithms of ``--algo``;
- :mod:`.loop`: the live run (:mod:`.loop.live_run`: poll, report, checkpoint, stop rules), its pace, its observers,
  its summary, stopping in order, steering from outside, replay saved with the checkpoints;
- :mod:`.changes`: the cluster changing under the run: lost components recovered, workers that leave in order,
  workers that retire as planned, elastic growth.
"""
