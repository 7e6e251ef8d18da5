"""The client of ``ttsq say`` and ``ttsq narrate`` (``narration.client``) through an API restart: a
real API stopped and started again on the same port while the client waits for a job, and an API
that never answered, which fails at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from api.main import create_app
from cli.processes import ManagedProcess, free_port, port_in_use, wait_until
from narration.client import RESTART_GRACE_S, ClientError, TTSQClient
from tests.conftest import ThreadedServer
from ttsq.settings import Settings

pytestmark = pytest.mark.recovery

DOWN_S = 3.0
"""How long the API stays down: longer than one retry pause, shorter than the client's grace."""


class Api:
    """An API on a fixed port that can be stopped and started again, as ``ttsq dev`` restarts one."""

    def __init__(self, settings: Settings, port: int) -> None:
        self.settings = settings
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._server: ThreadedServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._server = ThreadedServer(
            uvicorn.Config(create_app(self.settings), host="127.0.0.1", port=self.port, log_level="warning")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        server = self._server
        wait_until(lambda: server.started, 30, "API server")

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
            self._server = None


@pytest.fixture
def api(settings: Settings, worker: ManagedProcess) -> Iterator[Api]:
    server = Api(settings, free_port())
    server.start()
    yield server
    server.stop()


def test_a_client_waits_for_its_job_through_an_api_restart(api: Api) -> None:
    with TTSQClient(api.url) as client:
        job = client.submit("Hello through a restart.")
        api.stop()
        assert not port_in_use(api.port)
        restart = threading.Timer(DOWN_S, api.start)  # the restart, while the client is already waiting
        restart.start()
        try:
            done = client.wait(job["id"], 120)
        finally:
            restart.join()
        assert done["status"] == "succeeded"
        again = client.submit("And a second job, after it.")  # a POST, sent once the API is back
        assert client.wait(again["id"], 120)["status"] == "succeeded"


def test_an_api_that_never_answered_fails_at_once() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with TTSQClient(url) as client, pytest.raises(ClientError, match=f"cannot reach the ttsq API at {url}"):
        client.get("00000000-0000-0000-0000-000000000000")
    assert time.monotonic() - started < RESTART_GRACE_S / 2  # not retried: nothing says it ever existed
