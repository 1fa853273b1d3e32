"""The process watcher (daskrl/runtime/cleanup/process_watcher.py) is started by path, so its folder comes first on
its ``sys.path``: no module of that folder may bear the name of a standard library module."""

from __future__ import annotations

import sys
from pathlib import Path

from daskrl.runtime.cleanup import process_watcher


def test_the_watcher_started_by_path_imports_no_module_of_its_folder_in_place_of_the_standard_library():
    folder = Path(process_watcher.__file__).parent
    assert not {p.stem for p in folder.glob("*.py")} & set(sys.stdlib_module_names)
