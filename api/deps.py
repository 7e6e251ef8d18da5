"""Dependency aliases for route handlers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.state import AppState


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.ttsq
    return state


StateDep = Annotated[AppState, Depends(get_state)]
