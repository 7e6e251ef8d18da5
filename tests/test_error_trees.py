"""One place for each kind of name: every coded error class lives in one of the two error trees and
is drawn in its docstring, and every Redis key is spelled in ``ttsq/constants.py``. Read from the
source with ``ast``, so a new module that defines its own coded error or key is caught."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parent.parent
PACKAGES: Final = ("api", "workers", "ttsq", "tts_core", "cli", "narration")
TREES: Final = ("ttsq/errors.py", "tts_core/base/errors.py")
KEY: Final = re.compile(r"ttsq:[\w{*-]")
"""A Redis key or key pattern (``ttsq:job:…``), not prose that starts with the name (``ttsq: a …``)."""


def sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def coded_classes(path: Path) -> list[str]:
    """Classes declared with a stable error code (``class X(Base, code="...")``)."""
    tree = ast.parse(path.read_text())
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(k.arg == "code" for k in node.keywords)
    ]


def key_spellings(path: Path) -> list[int]:
    """Lines with a string literal or f-string that spells a Redis key (``ttsq:…``, ``{KEY_PREFIX}:…``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and KEY.match(node.value):
            found.append(node.lineno)
        elif isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if (
                isinstance(head, ast.FormattedValue)
                and isinstance(head.value, ast.Name)
                and head.value.id == "KEY_PREFIX"
            ):
                found.append(node.lineno)
    return found


def test_every_coded_error_is_in_one_of_the_two_trees() -> None:
    outside = {
        str(path.relative_to(ROOT)): names
        for path in sources()
        if str(path.relative_to(ROOT)) not in TREES and (names := coded_classes(path))
    }
    assert outside == {}


@pytest.mark.parametrize("tree", TREES)
def test_each_tree_draws_every_class_it_defines(tree: str) -> None:
    path = ROOT / tree
    drawing = ast.get_docstring(ast.parse(path.read_text())) or ""
    drawn = {line.strip(" │├└─").split()[0] for line in drawing.splitlines() if line.strip(" │├└─")[:1].isupper()}
    assert set(coded_classes(path)) <= drawn
    assert len(coded_classes(path)) >= 10


def test_the_check_sees_a_coded_error_and_a_key_spelled_elsewhere(tmp_path: Path) -> None:
    module = tmp_path / "stray.py"
    module.write_text(
        'class Oops(ServiceError, code="oops"):\n    pass\n\nKEY = f"{KEY_PREFIX}:stray"\nOTHER = "ttsq:x"\n'
    )
    assert coded_classes(module) == ["Oops"]
    assert key_spellings(module) == [4, 5]


def test_every_redis_key_is_spelled_in_constants() -> None:
    spelled = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources()
        if path != ROOT / "ttsq/constants.py" and not path.is_relative_to(ROOT / "tts_core")  # no Redis there
        for line in key_spellings(path)
    ]
    assert spelled == []
