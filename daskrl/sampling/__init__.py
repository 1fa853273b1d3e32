"""Sampling: rollout workers step their envs into shared-memory trajectory slots (:mod:`.rollout_worker`, the slots
in ``slots/``), acting inline or through inference workers (:mod:`.acting`, :mod:`.inference_worker`) with the
policies of ``policies/`` (the sampling policy, which policy acts for each agent, how each explores)."""
