"""The benchmark and example scripts import many of daskrl's names inside their functions, where an import error
shows only when that branch runs: ``bench_scale.py`` and ``soak.py`` imported a function that a
refactoring had removed and failed at their first line of work for two days. Every ``from daskrl... import name``
in them must resolve, wherever in the script it sits."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("examples/*.py")])


def daskrl_imports(script: Path) -> list[tuple[str, str, int]]:
    """(module, name, line) of every ``from daskrl... import name`` in ``script``, at any depth."""
    tree = ast.parse(script.read_text(), filename=str(script))
    return [(node.module, alias.name, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            and (node.module == "daskrl" or node.module.startswith("daskrl."))
            for alias in node.names]


def test_the_scripts_are_found_and_import_daskrl():
    names = {p.name for p in SCRIPTS}
    assert {"bench_scale.py", "soak.py", "bench_train.py"} <= names
    assert daskrl_imports(ROOT / "benchmarks" / "bench_scale.py"), "the walk found no daskrl import in bench_scale.py"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_daskrl_name_a_script_imports_exists(script: Path):
    missing = []
    for module_name, name, line in daskrl_imports(script):
        module = importlib.import_module(module_name)
        if name != "*" and not hasattr(module, name):
            try:  # a submodule imported by name: `from daskrl.runtime.workers import worker_server`
                importlib.import_module(f"{module_name}.{name}")
            except ModuleNotFoundError:
                missing.append(f"line {line}: from {module_name} import {name}")
    assert not missing, f"{script.name} imports names daskrl does not have: {missing}"
