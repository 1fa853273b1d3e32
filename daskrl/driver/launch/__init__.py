"""Everything up to training begun: checks before any process starts (:mod:`.preflight`, :mod:`.sizing`,
:mod:`.resumed_network`, :mod:`.model_check`), the experiment directory's lock (:mod:`.experiment`), a cluster deployed
for the run (:mod:`.deployment`), the start-up sequence and its clock (:mod:`.start`, :mod:`.startup`), Ctrl-C and
SIGTERM (:mod:`.stop_signals`)."""
