"""Behavior cloning (Pomerleau 1991; d3rlpy's BC: a deterministic policy regressed on the dataset's actions)."""
