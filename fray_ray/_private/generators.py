"""ObjectRefGenerator: the refs a streaming generator task yields, one at a time."""

from __future__ import annotations


class ObjectRefGenerator:
    """Iterates the ObjectRefs of a streaming generator's items as they are produced."""
