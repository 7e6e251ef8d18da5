"""``ttsq api``: the HTTP API, and with ``--voicevox-port`` the VOICEVOX-compatible facade at the
root of a second port, both in this one process.

One process, two uvicorn servers on one event loop: the facade is the very application the main app
mounts at ``/voicevox``, so it shares the main app's state (clients, event hub) instead of opening its
own. The facade's server starts once the main one has (its lifespan made that state). A signal stops
both: each server, stopping, raises again the signal it caught for the handler it replaced.
"""

from __future__ import annotations

import asyncio
from typing import Final

import uvicorn

from api.main import create_app, voicevox_app

START_POLL_S: Final = 0.05


def serve_api(host: str, port: int, voicevox_port: int | None, access_log: bool = True) -> None:
    app = create_app()
    main = uvicorn.Server(uvicorn.Config(app, host=host, port=port, access_log=access_log))
    if voicevox_port is None:
        main.run()
        return
    facade_config = uvicorn.Config(
        voicevox_app(app), host=host, port=voicevox_port, access_log=access_log, lifespan="off"
    )
    asyncio.run(_serve_both(main, uvicorn.Server(facade_config)))


async def _serve_both(main: uvicorn.Server, facade: uvicorn.Server) -> None:
    main_task = asyncio.create_task(main.serve())
    while not main.started:
        if main_task.done():  # it could not start: its error is the answer
            await main_task
            return
        await asyncio.sleep(START_POLL_S)
    facade_task = asyncio.create_task(facade.serve())
    await asyncio.wait({main_task, facade_task}, return_when=asyncio.FIRST_COMPLETED)
    main.should_exit = facade.should_exit = True  # one stopped (a signal, or a port in use): stop both
    await asyncio.gather(main_task, facade_task)
