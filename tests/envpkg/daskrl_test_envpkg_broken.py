"""A package that is installed but needs a dependency that is not (tests/drills/test_env_packages.py)."""

import daskrl_test_missing_dependency  # noqa: F401
