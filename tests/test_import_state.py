"""No state at import: importing any module of the service, in a fresh interpreter with no ``TTSQ_*``
variables, no ``.env`` and no Redis, reads no setting, opens no connection and connects no Celery signal
or OS signal handler. Settings, clients and handlers are made when a process starts (the API's
lifespan, a worker's start step, a command), so a test, Flower or a tool importing a module changes
nothing and needs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
PROBE: Final = ROOT / "tests" / "import_probe.py"


def probe(cwd: Path, *extra: str) -> list[str]:
    """What importing every module (and ``extra``) did, as the probe prints it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "PYTHONPATH": str(cwd)}
    done = subprocess.run(
        [sys.executable, str(PROBE), str(ROOT), *extra], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


def test_importing_any_module_reads_no_setting_connects_nothing_and_registers_no_signal(tmp_path: Path) -> None:
    assert probe(tmp_path) == ["clean"]


def test_the_probe_sees_a_module_that_does(tmp_path: Path) -> None:
    (tmp_path / "stateful_module.py").write_text(
        "from celery.signals import worker_ready\n"
        "from ttsq.settings import get_settings\n"
        "SETTINGS = get_settings()\n"
        "@worker_ready.connect\n"
        "def ready(**_):\n"
        "    pass\n"
    )
    found = probe(tmp_path, "stateful_module")
    assert found[0] == f"get_settings() at {tmp_path / 'stateful_module.py'}:3", found
    assert found[1].startswith("settings read at "), found
    assert found[2:] == ["signal worker_ready connected to stateful_module.ready"], found
