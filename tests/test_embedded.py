"""The locally run services keep their files in their own data folder and leave nothing elsewhere."""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

from cli.embedded import SeaweedService


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
