"""Playing a trained policy: ``daskrl enjoy`` and :func:`load_policy` (:mod:`.episodes`), and evaluation episodes
and videos while a run trains (:mod:`.evaluator`)."""

from daskrl.evaluation.episodes import enjoy, load_policy, run_episodes

__all__ = ["enjoy", "load_policy", "run_episodes"]
