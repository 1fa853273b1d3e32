"""Result bundles: ``daskrl publish`` writes a trained policy, its evaluation and what reruns it as a folder in the
Hugging Face Hub's model layout, offline (:mod:`.assemble`); ``huggingface_hub.upload_folder`` pushes it unchanged,
and ``daskrl enjoy --from`` and ``daskrl train --init-checkpoint`` read it back (:mod:`.bundle`).

Importing this package imports no torch (the command line's flags come from :mod:`.command`); its names do.
"""

from __future__ import annotations

from daskrl.lazy_names import lazy_names

_HOMES = {"publish_experiments": "assemble", "publish_sweep": "assemble", "Evaluation": "scores",
          "bundle_dir": "bundle"}

__getattr__ = lazy_names(__name__, _HOMES)

__all__ = sorted(_HOMES)
