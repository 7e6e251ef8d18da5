"""The locally run services keep their files in their own data folder and leave nothing elsewhere."""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

import pytest

from cli.embedded import WEED_GO_THREADS, SeaweedService


def recent_temp_entries(since: float, prefixes: tuple[str, ...]) -> list[str]:
    folder = Path(tempfile.gettempdir())
    return [p.name for p in folder.iterdir() if p.name.startswith(prefixes) and p.lstat().st_mtime >= since]


def test_seaweedfs_keeps_its_logs_and_sockets_in_its_data_folder(tmp_path: Path) -> None:
    started = time.time() - 1
    service = SeaweedService(tmp_path, "bucket").start()
    try:
        assert (tmp_path / "tmp" / "s3.sock").is_socket()
        assert any((tmp_path / "logs").glob("weed.*INFO*"))
        assert recent_temp_entries(started, ("weed.", f"seaweedfs-s3-{service.ports.s3}")) == []
        # weed hard-codes its gRPC sockets under /tmp; they exist while it runs...
        assert [path for path in service.grpc_sockets() if path.is_socket()]
    finally:
        service.stop()
    # ...and are gone once it stopped.
    assert [path for path in service.grpc_sockets() if path.exists()] == []


def test_seaweedfs_starts_again_on_fresh_ports_when_one_was_taken_first(tmp_path: Path) -> None:
    """Another process binds one of weed's picked ports before weed does: weed exits, and the
    service starts it again on a fresh pick rather than failing the caller."""
    service = SeaweedService(tmp_path, "bucket")
    taken = service.ports.internal["filer.port"]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        service.start()
        try:
            assert service.ports.internal["filer.port"] != taken
            assert f"port {taken} for filer" in (tmp_path / "weed.log").read_text(errors="replace").lower()
            assert service.process.alive
        finally:
            service.stop()


def _environment_of(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


def test_seaweedfs_runs_its_go_code_on_one_thread_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It shares the host with the model: one Go thread by default, and an operator's own
    ``GOMAXPROCS`` wins."""
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    service = SeaweedService(tmp_path / "default", "bucket").start()
    try:
        assert _environment_of(service.process.pid)["GOMAXPROCS"] == WEED_GO_THREADS == "1"
    finally:
        service.stop()
    monkeypatch.setenv("GOMAXPROCS", "3")
    service = SeaweedService(tmp_path / "chosen", "bucket").start()
    try:
        assert _environment_of(service.process.pid)["GOMAXPROCS"] == "3"
    finally:
        service.stop()
