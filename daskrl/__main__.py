"""``python -m daskrl ...``: the ``daskrl`` command (daskrl/launch.py), for an environment without its script."""

import sys

from daskrl.launch import main

sys.exit(main())
