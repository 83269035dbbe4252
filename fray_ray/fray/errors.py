"""`FrayError`, the base of every error the Fray layer raises on its own account.

It lives apart from `client.py` so that `actor.py` can derive `ActorUnavailableError` from it
without importing the protocol module, which names the actor types in its signatures. The
tree is drawn in `client.py`'s docstring; both modules re-export what they define.
"""

from __future__ import annotations

__all__ = ["FrayError"]


class FrayError(RuntimeError):
    """Base of the errors the Fray layer raises itself."""
