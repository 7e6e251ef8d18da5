"""The import structure: each package imports only the floors below it, no module imports a route
module but the app that assembles them, and the narration client stays an HTTP client.

Read from the source with ``ast`` (imports inside functions included), so a lazy import that runs
back up the layers is caught as surely as one at the top of a module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from narration import api_contract
from ttsq import constants, jobs

ROOT: Final = Path(__file__).resolve().parent.parent

FORBIDDEN: Final = {
    "tts_core": {"ttsq", "api", "workers", "cli", "narration", "bench", "celeryconfig"},
    "ttsq": {"api", "workers", "cli", "narration", "bench"},
    "api": {"workers", "cli", "narration", "bench"},
    "workers": {"api", "cli", "narration", "bench"},
    "narration": {"ttsq", "api", "workers", "cli", "bench", "celeryconfig"},
    "cli": {"bench"},
}
"""Top-level packages that each package must not import: the floors above it, and beside it."""


def imported_modules(path: Path) -> set[str]:
    """Every module a source file imports, anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def upward_imports(package: str, forbidden: set[str]) -> list[str]:
    found = []
    for path in sources(package):
        for module in sorted(imported_modules(path)):
            if module.split(".")[0] in forbidden:
                found.append(f"{path.relative_to(ROOT)} imports {module}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_runs_up_or_across_the_layers(package: str) -> None:
    assert upward_imports(package, FORBIDDEN[package]) == []


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from workers.tasks import synthesize_job\n    return synthesize_job\n")
    assert imported_modules(module) == {"workers.tasks"}


def test_only_the_app_imports_route_modules() -> None:
    importers = [
        str(path.relative_to(ROOT))
        for package in ("api", "workers", "ttsq", "tts_core", "cli", "narration", "bench")
        for path in sources(package)
        if any(m.startswith("api.routes.") for m in imported_modules(path))
    ]
    assert importers == ["api/main.py"]


def test_the_narration_client_loads_no_service_code_and_no_inference_runtime() -> None:
    modules = ["narration.narrate", "narration.client", "narration.m4b", "narration.books"]
    probe = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(sorted({{m.split('.')[0] for m in sys.modules}}))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    top_level = set(ast.literal_eval(loaded.stdout))
    assert "narration" in top_level
    for absent in ("api", "workers", "ttsq", "cli", "onnxruntime", "piper_phonemize", "redis", "celery", "boto3"):
        assert absent not in top_level


def test_the_clients_copy_of_the_api_contract_matches_the_service() -> None:
    assert {s.value: s.terminal for s in api_contract.JobStatus} == {s.value: s.terminal for s in jobs.JobStatus}
    assert api_contract.MAX_WAIT_S == constants.MAX_WAIT_S
