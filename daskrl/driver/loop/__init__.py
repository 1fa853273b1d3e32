"""The live run: its loop (:mod:`.live_run`: poll, report, checkpoint, stop rules) and its pace (:mod:`.pacing`: on
a clock, or once per training step under ``--deterministic``), the observer interface (:mod:`.observers`), the
summary ``train()`` returns (:mod:`.summary`), stopping in order (:mod:`.stopping`), changes asked from outside
(:mod:`.steering`), replay saved with the checkpoints (:mod:`.replay_checkpoints`)."""
