"""The checks of single option values (type, finite, range, choices, patterns, files), read from each field's
metadata (:func:`~daskrl.config.options.opt`): each problem is one line that names the flag."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from typing import Any


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def as_option(name: str, value: Any) -> str:
    """How a user writes the option with this value: ``--x 1``, ``--x 256 256``, ``--x`` or ``--no-x``."""
    if isinstance(value, bool):
        return flag(name) if value else "--no-" + flag(name)[2:]
    return f"{flag(name)} {' '.join(map(str, value)) if isinstance(value, list) else value}"


def check_field(f: dataclasses.Field, hint: Any, value: Any) -> str:
    """The problem with ``value`` for config field ``f`` (type, NaN/inf, range, choices), or '' when it is fine."""
    meta, name = f.metadata, flag(f.name)
    optional = type(None) in typing.get_args(hint)
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if optional else hint
    if value is None:
        return "" if optional else f"{name} needs a value, got None"
    if set(typing.get_args(base)) == {int, str}:  # a number, or a word such as 'auto' (the pattern)
        if isinstance(value, str):
            if re.fullmatch(meta["pattern"], value):
                return ""
            return f"{name} must be {meta['pattern_help']}, got {value!r}"
        return _check_number(name, int, value, meta)
    if base is bool:
        return "" if isinstance(value, bool) else f"{name} must be true or false, got {value!r}"
    if base is dict:
        return "" if isinstance(value, dict) else f"{name} must be a JSON object, got {value!r}"
    if base is str:
        if not isinstance(value, str):
            return f"{name} must be text, got {value!r}"
        if meta.get("low") and len(value) < meta["low"]:
            return f"{name} needs a value, got {value!r}"
        if value and meta.get("pattern") and not re.fullmatch(meta["pattern"], value):
            return f"{name} must be {meta['pattern_help']}, got {value!r}"
        if value and meta.get("file") and not os.path.isfile(value):
            return f"{name} {value!r} is not a file"
    elif typing.get_origin(base) is list:
        item_type = typing.get_args(base)[0]
        if not isinstance(value, list):
            return f"{name} must be a list, got {value!r}"
        if item_type is str:
            return next((f"{name} items must be non-empty text, got {item!r}" for item in value
                         if not isinstance(item, str) or not item), "")
        return next((p for item in value if (p := _check_number(f"{name} (each item)", int, item, meta))), "")
    elif base in (int, float):
        problem = _check_number(name, base, value, meta)
        if problem:
            return problem
    choices = meta.get("choices")
    if choices and value not in choices:
        return f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}"
    return ""


def _check_number(name: str, kind: type, value: Any, meta: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        return f"{name} must be {'a whole number' if kind is int else 'a number'}, got {value!r}"
    if not math.isfinite(value):
        return f"{name} must be a finite number, got {value!r}"
    low, high, low_open = meta.get("low"), meta.get("high"), meta.get("low_open")
    if low is not None and (value < low or (low_open and value == low)) or high is not None and value > high:
        if low is not None and high is not None:
            wanted = f"within {'(' if low_open else '['}{low:g}, {high}]"
        elif low is not None:
            wanted = f"> {low:g}" if low_open else f">= {low:g}"
        else:
            wanted = f"<= {high}"
        return f"{name} must be {wanted}, got {value!r}"
    return ""
