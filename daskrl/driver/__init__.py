"""The driver of a run, next to the ``Client``: checks before start (preflight, sizing), the experiment directory,
where components go (placement), the live components (fleet), bringing lost ones back (recovery), following the
cluster (elastic), each policy's books (policies), and the loop that reports and checkpoints (runner)."""
