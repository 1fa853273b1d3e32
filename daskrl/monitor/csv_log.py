"""A CSV of metrics: one row per reporting period, columns fixed by the first row (new keys are ignored)."""

from __future__ import annotations

import csv
import os
from typing import Any


class CsvLog:
    def __init__(self, path: str, append: bool = False) -> None:
        self.path = path
        self.columns: list[str] | None = None
        if append and os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, newline="") as f:
                self.columns = next(csv.reader(f), None)
        self._file = open(path, "a" if append else "w", newline="")
        self._writer = csv.writer(self._file)

    def write(self, row: dict[str, Any]) -> None:
        if self.columns is None:
            self.columns = list(row)
            self._writer.writerow(self.columns)
        self._writer.writerow([_fmt(row.get(c, "")) for c in self.columns])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return value
