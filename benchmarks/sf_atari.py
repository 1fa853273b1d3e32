"""Sample Factory 2.1.1's ``sf_examples.atari`` training, launched by bench_atari.py with the SF venv's python.

Run:  .venv-sf/bin/python benchmarks/sf_atari.py --env atari_pong --experiment sf --train_dir /tmp/sf ...
(every argument is Sample Factory's own).

Sample Factory 2.1.1 needs gymnasium < 1, and ale-py 0.12 (the one that ships the ROMs) registers its
``PongNoFrameskip-v4`` ids only where gymnasium has its 1.x vector API: its ``import ale_py`` then registers nothing,
and SF's ``gym.make`` fails with "Environment PongNoFrameskip doesn't exist". So this script registers the v0-v4 ids
itself, at import time: SF starts its workers with ``spawn``, which imports this file again in each of them.
"""

from __future__ import annotations

import sys

try:
    import gymnasium as gym
    from ale_py.registration import register_v0_v4_envs

    if "PongNoFrameskip-v4" not in gym.registry:  # an ale-py/gymnasium pair that registers them already
        register_v0_v4_envs()
except ImportError as exc:  # said once, in the launching process; SF's own error follows
    print(f"sf_atari: cannot register the ALE ids ({exc}); install ale-py in this venv", file=sys.stderr)

if __name__ == "__main__":
    from sf_examples.atari.train_atari import main

    sys.exit(main())
