"""Imported first in the worker forkserver's preload list: pauses the cyclic garbage collector for the imports that
follow (:mod:`daskrl.runtime.workers.preload_done` resumes it).

Why: importing distributed, torch and daskrl's worker modules allocates about 200,000 tracked objects, and the
collector's passes over them while they pile up took 0.15-0.2 s of those imports' 1.3 s on two cores (1.19-1.21 s
against 1.33-1.43 with it running), time on the way to a run's first training step. The few thousand objects that
were garbage by the end (7,207 in that list, 0.7 MB by their own sizes) are frozen with the rest instead of collected
(a full pass costs 0.1 s): never written again, shared by the forked workers."""

import gc

gc.disable()
