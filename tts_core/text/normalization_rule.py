"""What a normalisation rule is and what it makes, apart from the rules themselves (``normalization``
runs the rules of ``normalization_en`` and ``normalization_ja``, which build on these)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """Say ``spoken`` in place of ``text[start:end]``."""

    start: int
    end: int
    spoken: str


Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str]], Edit | None]]
"""One rule: the option that switches it, its pattern, and what to say for a match (None: nothing)."""
