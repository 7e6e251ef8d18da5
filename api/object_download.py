"""A stored object passed on through the API, for clients that cannot follow a presigned URL to
the object store: a browser page under a Content-Security-Policy of its own origin, or one whose
store sends no CORS headers. The key is checked by the route (the caller owns the job or batch);
the bytes stream from the store in chunks, never held whole."""

from __future__ import annotations

from typing import Literal
from urllib.parse import quote

from fastapi.responses import StreamingResponse

from api.errors import ApiError
from ttsq.storage import ObjectStore

Disposition = Literal["inline", "attachment"]


def object_response(objects: ObjectStore, key: str, filename: str, disposition: Disposition) -> StreamingResponse:
    """The object at ``key`` as the response body, named ``filename``; 404 if the store has lost it
    (its lifetime ended between the record's read and this one)."""
    stored = objects.open(key)
    if stored is None:
        raise ApiError(404, "not_found", "the stored file is gone: its lifetime ended")
    headers = {
        "Content-Length": str(stored.size),
        "Content-Disposition": content_disposition(disposition, filename),
        "Cache-Control": "private, no-store",
    }
    return StreamingResponse(stored.chunks, media_type=stored.content_type, headers=headers)


def content_disposition(disposition: Disposition, filename: str) -> str:
    """The header with an ASCII fallback name and the exact name in RFC 6266's ``filename*``: a
    chapter title may be in any script, and a quote or newline in it must not break the header."""
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename)
    return f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"
