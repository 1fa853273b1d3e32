"""What every option is made of: :func:`opt` (a dataclass field with its help text and allowed values) and
:class:`Section` (a group of options that remembers which were set), shared by the sections of :mod:`.options` and
:mod:`.deploy_options`."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import field
from typing import Any


def opt(default: Any, help: str, *, low: float | None = None, high: float | None = None, low_open: bool = False,
        choices: Collection | None = None, pattern: str = "", pattern_help: str = "", file: bool = False) -> Any:
    """A config field: its default, help text, and what values it allows: ``low``/``high`` bounds (inclusive;
    ``low_open`` excludes ``low``; for a list they bound every item; for text ``low=1`` means not empty),
    ``choices``, or for text a regular expression ``pattern`` (described to the user by ``pattern_help``) or,
    with ``file``, the path of an existing file."""
    meta = {"help": help, "low": low, "high": high, "low_open": low_open, "choices": choices, "pattern": pattern,
            "pattern_help": pattern_help, "file": file}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


class Section:
    """A config section that remembers which options were set after it was made (``from_flat``, the command line,
    ``config.learner.gamma = ...``): those win over the defaults of the env's family (daskrl/config/env_defaults.py)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_explicit", set())

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        explicit = self.__dict__.get("_explicit")
        if explicit is not None:
            explicit.add(name)

    def explicit(self) -> set[str]:
        return set(self.__dict__.get("_explicit", ()))

    def changed(self) -> set[str]:
        """The options set to another value than their default: a flag the user gave, as far as a rule can tell (a
        config.json a run saved sets every option, so :meth:`explicit` alone counts its defaults as given)."""
        defaults = type(self)()
        return {name for name in self.explicit() if getattr(self, name) != getattr(defaults, name)}
