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
from tts_core.mastering.formats import AudioFormat
from ttsq import constants, job_record

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
        if any(m == "api.routes" or m.startswith("api.routes.") for m in imported_modules(path))
    ]
    assert importers == ["api/main.py"]


def test_the_narration_client_loads_no_service_code_and_no_inference_runtime() -> None:
    modules = ["narration.narrate", "narration.client", "narration.books"]
    probe = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(sorted({{m.split('.')[0] for m in sys.modules}}))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    top_level = set(ast.literal_eval(loaded.stdout))
    assert "narration" in top_level
    for absent in ("api", "workers", "ttsq", "cli", "onnxruntime", "piper_phonemize", "redis", "celery", "boto3"):
        assert absent not in top_level


def test_the_clients_copy_of_the_api_contract_matches_the_service() -> None:
    assert {s.value: s.terminal for s in api_contract.JobStatus} == {s.value: s.terminal for s in job_record.JobStatus}
    assert {f.value: api_contract.suffix(f.value) for f in AudioFormat} == {f.value: f.extension for f in AudioFormat}
    assert api_contract.MAX_WAIT_S == constants.MAX_WAIT_S


STORE_CONSTRUCTORS: Final = {
    "JobStore", "SegmentStore", "BatchStore", "TenantStore", "Quotas", "ObjectStore", "make_part_store"
}  # fmt: skip
PROBES: Final = {"cli/dev.py"}
"""``ttsq dev`` checks that an S3 service it is about to use answers, before any store exists."""


def constructed(path: Path) -> set[str]:
    return {
        node.func.id
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in STORE_CONSTRUCTORS
    }


def test_stores_are_wired_in_one_place() -> None:
    builders = {
        str(path.relative_to(ROOT)): sorted(names)
        for package in ("api", "workers", "ttsq", "cli", "narration", "bench")
        for path in sources(package)
        if (names := constructed(path)) and str(path.relative_to(ROOT)) not in PROBES
    }
    assert builders == {"ttsq/stores.py": sorted(STORE_CONSTRUCTORS)}


def defines_worker_app(path: Path) -> bool:
    """A module-level ``app = Celery(...)``: what ``celery -A`` runs (a producer client is no app)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if (
                isinstance(func, ast.Name)
                and func.id == "Celery"
                and any(isinstance(t, ast.Name) and t.id == "app" for t in node.targets)
            ):
                return True
    return False


def test_one_celery_app_module_per_worker_kind() -> None:
    apps = [
        str(path.relative_to(ROOT))
        for package in ("api", "workers", "ttsq", "cli", "narration", "bench")
        for path in sources(package)
        if defines_worker_app(path)
    ]
    assert sorted(apps) == ["workers/app.py", "workers/service.py"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module to the project modules it imports (anywhere in it, ``TYPE_CHECKING`` included)."""
    paths = [
        path for package in ("api", "workers", "ttsq", "tts_core", "cli", "narration") for path in sources(package)
    ]
    modules = {module_name(path): path for path in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_modules(path):
            while imported and imported not in modules:  # ``from a.b import c``: the module a.b
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Modules that import each other, directly or through others (a depth-first search)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                found.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_no_two_modules_import_each_other() -> None:
    assert circles(import_graph()) == []


def test_the_circle_check_sees_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


WINGS: Final = {
    "base": set(),
    "text": {"base"},
    "mastering": {"base"},
    "lexicon": {"base", "text"},
    "marks": {"base", "text"},
    "frontend": {"base", "text", "lexicon"},
    "books": {"base", "text"},
    "voices": {"base", "text", "mastering", "lexicon", "marks", "frontend"},
}
"""``tts_core``'s wings and the wings each may import: those below it, never one above or beside."""


def wing_imports(root: Path) -> list[str]:
    """Every import of a ``tts_core`` wing that runs up or across, or names the package itself
    (``from tts_core import x``) rather than a wing's module."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        wing = parts[0] if len(parts) > 1 else None
        for module in sorted(imported_modules(path)):
            names = module.split(".")
            if names[0] != "tts_core":
                continue
            if len(names) < 2 or names[1] not in WINGS:
                found.append(f"{path.relative_to(root)} imports {module}: not a wing's module")
            elif wing is not None and names[1] != wing and names[1] not in WINGS[wing]:
                found.append(f"{path.relative_to(root)} imports {module}: {wing} may not import {names[1]}")
    return found


def test_tts_core_is_wings_and_each_imports_only_those_below() -> None:
    root = ROOT / "tts_core"
    packages = {path.parent.name for path in root.glob("*/__init__.py")}
    assert packages == set(WINGS), "a wing without its rules, or a rule without its wing"
    assert sorted(path.name for path in root.glob("*.py")) == ["__init__.py"], "modules outside the wings"
    assert wing_imports(root) == []
    importing_inits = [str(path) for path in root.rglob("__init__.py") if imported_modules(path)]
    assert importing_inits == [], "a package's __init__ imports: importing one module would load others"


def test_the_wing_check_sees_an_import_from_above_and_one_past_the_wings(tmp_path: Path) -> None:
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "up.py").write_text("from tts_core.voices.voice import Voice\nfrom tts_core import plan\n")
    assert wing_imports(tmp_path) == [
        "text/up.py imports tts_core: not a wing's module",
        "text/up.py imports tts_core.voices.voice: text may not import voices",
    ]
