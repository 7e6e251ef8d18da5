"""docs/ARCHITECTURE.md's layout lists the tree module for module: every module of the packages is
named under its package's heading, and every module named there exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
PACKAGES: Final = ("tts_core", "ttsq", "workers", "api", "cli", "narration")
HEADING: Final = re.compile(r"^### `(\w+)/`", re.MULTILINE)
ENTRY: Final = re.compile(r"^- `([\w/]+\.py)`:", re.MULTILINE)


def listed(document: str) -> set[str]:
    """``package/module.py`` for each entry under a ``### `package/` `` heading of the layout."""
    layout = document.split("## Layout", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for section in layout.split("\n### ")[1:]:
        package = HEADING.match(f"### {section}")
        if package is not None:
            names |= {f"{package[1]}/{module}" for module in ENTRY.findall(section)}
    return names


def in_tree() -> set[str]:
    """Every module of the packages; a package's ``__init__.py`` only where it holds code."""
    modules = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "__init__.py" and not _has_code(path):
                continue
            modules.add(str(path.relative_to(ROOT)))
    return modules


def _has_code(path: Path) -> bool:
    """More than a docstring."""
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    text = "\n".join(lines)
    return bool(re.sub(r'^"""[\s\S]*?"""', "", text).strip())


def test_the_layout_names_every_module_and_nothing_else() -> None:
    documented = listed((ROOT / "docs/ARCHITECTURE.md").read_text())
    assert in_tree() - documented == set(), "modules missing from docs/ARCHITECTURE.md's layout"
    assert documented - in_tree() == set(), "modules in docs/ARCHITECTURE.md's layout that do not exist"


def test_the_check_reads_a_layout() -> None:
    document = (
        "# A\n\n## Layout\n\n### `api/`: x\n\n- `main.py`: y.\n- `routes/jobs.py`: z.\n\n## Next\n\n- `no.py`: n\n"
    )
    assert listed(document) == {"api/main.py", "api/routes/jobs.py"}
