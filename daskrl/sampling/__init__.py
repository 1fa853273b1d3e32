"""Sampling: rollout workers step their envs into shared-memory trajectory slots (:mod:`.rollout_worker`,
:mod:`.trajectories`), acting inline or through inference workers (:mod:`.acting`, :mod:`.inference_worker`) with
the sampling policy (:mod:`.policy`); which policy acts for each agent (:mod:`.policy_map`)."""
