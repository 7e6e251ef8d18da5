"""``GET /``: the studio, a page for people who don't write code (static ES modules, no build step,
nothing from a CDN), under a Content-Security-Policy that allows only its own origin's scripts."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.gzip import GZipMiddleware

from api.deps import StateDep

STATIC_DIR: Final = Path(__file__).resolve().parent.parent / "static"

CONTENT_SECURITY_POLICY: Final = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "media-src 'self' blob:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
"""No inline script or style, no other origin: a script injected through a job's text or a voice
name would not run, and the key (in sessionStorage) can leave only for this API. Audio plays from
blob URLs of files fetched with the key."""

PAGE_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


KEYS_PLACEHOLDER: Final = 'data-keys=""'


@router.get("/")
def index(state: StateDep) -> HTMLResponse:
    """The page, telling its script whether this server requires keys, so that it asks for one
    without first being refused (a 401 in the console of every visitor)."""
    keys = "required" if state.settings.auth_required else "optional"
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8").replace(KEYS_PLACEHOLDER, f'data-keys="{keys}"')
    return HTMLResponse(page, headers=PAGE_HEADERS)


STATIC_GZIP_MIN_BYTES: Final = 1024
"""Files from this size are sent gzipped to a browser that takes it: the page's modules and style,
about 60 KB in all, go in about a third of that. Only here: audio and event streams stay as they are."""


def mount_static(app: FastAPI) -> None:
    """The page's modules and style under ``/static``."""
    files = StaticFiles(directory=STATIC_DIR)
    app.mount("/static", GZipMiddleware(files, minimum_size=STATIC_GZIP_MIN_BYTES), name="static")
