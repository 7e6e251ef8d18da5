"""``GET /``: a small page to try ttsq in a browser (static files, no build step, no CDN)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR: Final = Path(__file__).resolve().parent.parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
def index() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


def mount_static(app: FastAPI) -> None:
    """The page's script and style under ``/static``."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
