"""What ``pip install daskrl`` gives a user: the wheel holds every package of daskrl/ (a folder without
``__init__.py`` is left out by ``packages = find:``, and an editable install hides that)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def source_packages() -> set[str]:
    """Every folder under daskrl/ that holds Python files, as a dotted name."""
    return {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "daskrl").rglob("*.py")
            if "__pycache__" not in p.parts}


def wheel_packages(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {".".join(Path(n).parent.parts) for n in z.namelist() if n.endswith(".py")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(REPO)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [built] = out.glob("daskrl-*.whl")
    return built


def test_the_wheel_holds_every_package(wheel):
    packages = source_packages()
    assert {"daskrl", "daskrl.sampling", "daskrl.learning", "daskrl.driver"} <= packages  # the scan works
    missing = packages - wheel_packages(wheel)
    assert not missing, f"folders of daskrl/ the wheel leaves out (add an __init__.py): {sorted(missing)}"


def test_the_check_finds_a_folder_left_out(tmp_path):
    wheel = tmp_path / "daskrl-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("daskrl/__init__.py", "")
    assert "daskrl.sampling" in source_packages() - wheel_packages(wheel)
