"""Checks of a decoded JSON body that no field's type makes, run before the fields are validated.

``json.loads`` lets through what JSON (RFC 8259) and UTF-8 do not allow: a lone surrogate
(``"\\udcff"``), which no UTF-8 encoder can write back, so that it would fail later, storing the job
or answering with it; and ``NaN`` / ``Infinity``, which are not JSON numbers. Nesting is bounded too,
so that nothing walks a hostile ``metadata`` recursively.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from pydantic_core import PydanticCustomError

MAX_DEPTH: Final = 32
"""Deepest nesting of objects and arrays in a body (metadata included): more than any client needs."""

_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
"""``json.loads`` joins an escaped pair into one character: whatever surrogate is left is alone."""


def lone_surrogate(text: str) -> str | None:
    found = _LONE_SURROGATE.search(text)
    if found is None:
        return None
    return f"a lone surrogate (U+{ord(found.group()):04X}) at position {found.start()}"


def _child(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def _problem(path: str, value: object, depth: int) -> tuple[str, bool] | None:
    """What is wrong with ``value`` itself (not its children), and whether it is a JSON syntax error."""
    where = path or "body"
    if isinstance(value, str) and (found := lone_surrogate(value)) is not None:
        return f"{where}: contains {found}", False
    if isinstance(value, float) and not math.isfinite(value):
        name = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
        return f"{where}: {name} is not a JSON number", True
    if isinstance(value, dict | list) and depth > MAX_DEPTH:
        return f"{where}: nested deeper than {MAX_DEPTH} levels", False
    if isinstance(value, dict):
        for key in value:
            if (found := lone_surrogate(key)) is not None:
                return f"{where}: a key contains {found}", False
    return None


def check_body(body: Any) -> None:
    """Raise a pydantic error naming the first offending field (``text: contains a lone surrogate
    (U+DCFF) at position 4``); walked with a stack, since a body may be nested deep on purpose.
    NaN and Infinity are ``json_invalid`` errors, which the API answers as malformed JSON."""
    pending: list[tuple[str, object, int]] = [("", body, 0)]
    while pending:
        path, value, depth = pending.pop()
        problem = _problem(path, value, depth)
        if problem is not None:
            message, syntax = problem
            if syntax:
                raise PydanticCustomError("json_invalid", "{error}", {"error": message})
            raise PydanticCustomError("unsafe_json", "{detail}", {"detail": message})
        children: list[tuple[str | int, object]]
        if isinstance(value, dict):
            children = list(value.items())
        elif isinstance(value, list):
            children = list(enumerate(value))
        else:
            continue
        pending.extend((_child(path, key), child, depth + 1) for key, child in reversed(children))
