"""What an actor's calls become when its process dies: Ray 2.60's restart and retry rules.

- The actor comes back after its process dies while restarts remain (`max_restarts`; -1: no
  limit), unless it was killed for good (`ray.kill`) or left on purpose (`exit_actor()`).
- A call that was sent to the dead process is sent again to the next instance while it has
  retries left (`max_task_retries`; -1: no limit); each death it lives through costs one
  retry. A call without retries fails with `ActorUnavailableError` while the actor restarts
  (it may or may not have run) and with `ActorDiedError` once the actor will not come back.
- A call made while the actor restarts waits for the next instance if it may be retried. One
  that may not (`max_task_retries=0`) fails at once with `ActorUnavailableError`, as Ray 2.60
  fails it; waiting in the queue costs no retry (Ray's documented rule).
- A user exception is retried the same way when the call's `retry_exceptions` matches it:
  `max_task_retries` is one budget for crashes and exceptions.

The ActorManager owns the state; this module only decides, so the rules can be read (and
tested) in one place.
"""

from __future__ import annotations

import enum
import threading

from fray_ray._private.core.retry_policy import retries_user_exception  # noqa: F401 - one of the rules above
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray.exceptions import ActorDeathInfo, ActorDeathReason, ActorDiedError, ActorUnavailableError

#: How often the job of a restarting actor is checked, in case its restart never comes.
RESTART_CHECK_S = 1.0
#: Iris keeps restart budgets in 32 bits; a larger budget is the same as no limit.
_IRIS_RESTART_LIMIT = 2**31 - 1
#: Ray's wording for a call refused while the actor restarts.
RESTARTING_REASON = "The actor is temporarily unavailable: IOError: The actor is restarting."
#: ... and for a call whose process died under it.
DIED_IN_FLIGHT_REASON = (
    "The actor is temporarily unavailable: its worker process died while this call was in flight, "
    "and the actor is restarting"
)


class CallFate(enum.Enum):
    """What happens to one call when its actor cannot run it now."""

    SEND = "send"  # keep it: send it (again) to the next instance of the actor
    UNAVAILABLE = "unavailable"  # fail it with ActorUnavailableError: the actor is restarting
    DIED = "died"  # fail it with the actor's death: the actor will not come back


def can_restart(max_restarts: int, restarts_done: int, *, stopped: bool) -> bool:
    """True if an actor whose process just died gets another instance."""
    if stopped:
        return False
    return max_restarts < 0 or restarts_done < max_restarts


def iris_restart_budget(max_restarts: int) -> int:
    """The restart budget to ask Iris for: Ray's value, with anything Iris cannot hold as -1."""
    return -1 if max_restarts >= _IRIS_RESTART_LIMIT else max_restarts


class RetryBudget:
    """Retries left per pending call (-1: no limit). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._left: dict[bytes, int] = {}

    def admit(self, call_id: bytes, retries: int) -> None:
        if retries == 0:
            return  # a call it does not know has none left: most calls cost nothing here
        with self._lock:
            self._left[call_id] = retries

    def left(self, call_id: bytes) -> int:
        with self._lock:
            return self._left.get(call_id, 0)

    def spend(self, call_id: bytes) -> bool:
        """Use one retry of the call; False if it has none left."""
        with self._lock:
            left = self._left.get(call_id, 0)
            if left == 0:
                return False
            if left > 0:
                self._left[call_id] = left - 1
            return True

    def forget(self, call_id: bytes) -> None:
        if not self._left:
            return  # a glance: admitted calls are there before they can be forgotten
        with self._lock:
            self._left.pop(call_id, None)


def fate_at_death(budget: RetryBudget, call_id: bytes, *, restarting: bool) -> CallFate:
    """The fate of a call that was sent to an instance that just died (spends a retry)."""
    if not restarting:
        return CallFate.DIED
    return CallFate.SEND if budget.spend(call_id) else CallFate.UNAVAILABLE


def fate_while_restarting(budget: RetryBudget, call_id: bytes) -> CallFate:
    """The fate of a new call while the actor restarts (costs no retry)."""
    return CallFate.SEND if budget.left(call_id) != 0 else CallFate.UNAVAILABLE


def unavailable_error(actor_id: bytes, reason: str) -> SerializedValue:
    return serialize_error(ActorUnavailableError(reason, actor_id))


def died_error(class_name: str, actor_id: bytes, reason: str, detail: str = "", pid: int | None = None,
               namespace: str | None = None) -> BaseException:
    """The ActorDiedError of an actor that will not come back, worded as Ray words it."""
    return ActorDiedError(ActorDeathInfo(
        ActorDeathReason(reason), class_name=class_name, actor_id=actor_id.hex(), pid=pid, namespace=namespace,
        detail=detail,
    ))


def unknown_actor_error(actor_id: bytes) -> BaseException:
    return died_error("?", actor_id, "process_died", "The actor is not known to this session (it may have ended).")
