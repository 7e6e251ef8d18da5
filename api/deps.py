"""Dependency aliases for route handlers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.state import AppState
from ttsq.settings import Settings


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.ttsq
    return state


def get_settings(request: Request) -> Settings:
    return get_state(request).settings


StateDep = Annotated[AppState, Depends(get_state)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
