"""A CSV of metrics: one row per reporting period, flushed per row so a crash leaves a readable prefix.

Columns come from the first row. A later row with new columns (an env's info metric first reported minutes into the
run) rewrites the file once with the wider header, atomically (a temporary file replaces it), so every row stays
readable under one header and earlier rows get empty cells for the new columns.
"""

from __future__ import annotations

import csv
import os
import tempfile
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
        elif any(key not in self.columns for key in row):
            self._widen([key for key in row if key not in self.columns])
        self._writer.writerow([_fmt(row.get(c, "")) for c in self.columns])
        self._file.flush()

    def _widen(self, new_columns: list[str]) -> None:
        """Rewrite the file with ``new_columns`` added to its header (earlier rows: empty cells there)."""
        self._file.close()
        with open(self.path, newline="") as f:
            rows = list(csv.reader(f))[1:]
        self.columns = [*self.columns, *new_columns]
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path) or ".", prefix=".metrics.", suffix=".csv")
        with os.fdopen(fd, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(self.columns)
            writer.writerows(r + [""] * len(new_columns) for r in rows)
        os.replace(tmp, self.path)
        self._file = open(self.path, "a", newline="")
        self._writer = csv.writer(self._file)

    def close(self) -> None:
        self._file.close()


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return value
