"""`ray.experimental.tqdm_ray`: progress bars that work from tasks and actors.

`tqdm` has the small part of tqdm's interface Ray's has (iterate, `update`, `set_description`,
`refresh`, `close`, `n`, `total`). In a worker, a bar prints its state as one JSON line at most
every `flush_interval_s` (and when it closes); the driver takes those lines out of the task
output and draws the bars (see `fray_ray._private.observe.progress_bars`). In the driver, or in a task
of a local-mode session, the bar is drawn at once.
"""

from __future__ import annotations

import builtins
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from fray_ray._private.core import runtime_state
from fray_ray._private.core.execution import node_ip
from fray_ray._private.observe.progress_bars import MAGIC, driver_bars

__all__ = ["RAY_TQDM_MAGIC", "safe_print", "tqdm"]

RAY_TQDM_MAGIC = MAGIC


def safe_print(*args: Any, **kwargs: Any) -> None:
    """`print` that does not land in the middle of a bar drawn in place."""
    driver_bars().before_print()
    builtins.print(*args, **kwargs)


def _drawn_here() -> bool:
    """Whether this process draws bars itself (the driver, or no session at all)."""
    runtime = runtime_state.process_runtime_or_none()
    return runtime is None or runtime.is_driver


class tqdm:  # noqa: N801 - tqdm's own name
    """A progress bar: `for x in tqdm(range(n), desc="step")`, or `update(k)` by hand."""

    DEFAULT_FLUSH_INTERVAL_SECONDS = 1.0

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        desc: str | None = None,
        total: int | None = None,
        unit: str | None = None,
        position: int | None = None,
        flush_interval_s: float | None = None,
    ) -> None:
        if total is None and iterable is not None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except (TypeError, AttributeError):
                total = None
        if flush_interval_s is not None and (not isinstance(flush_interval_s, (int, float)) or flush_interval_s < 0):
            raise ValueError(f"flush_interval_s must be a number >= 0, got {flush_interval_s!r}")
        self._iterable = iterable
        self._desc = desc or ""
        self._total = total
        self._unit = unit or "it"
        self._position = position or 0
        self._flush_interval_s = self.DEFAULT_FLUSH_INTERVAL_SECONDS if flush_interval_s is None else flush_interval_s
        self._x = 0
        self._uuid = uuid.uuid4().hex
        self._closed = False
        self._last_flush = 0.0
        self._dump_state(force=True)

    @property
    def n(self) -> int:
        """How far the bar is."""
        return self._x

    @property
    def total(self) -> int | None:
        return self._total

    def set_description(self, desc: str) -> None:
        self._desc = desc
        self._dump_state()

    def update(self, n: int = 1) -> None:
        self._x += n
        self._dump_state()

    def refresh(self) -> None:
        self._dump_state(force=True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._dump_state(force=True)

    def __iter__(self) -> Iterator[Any]:
        if self._iterable is None:
            raise ValueError("a tqdm bar made without an iterable cannot be iterated; call update() instead")
        try:
            for item in self._iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> tqdm:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _get_state(self) -> dict[str, Any]:
        return {
            "__magic_token__": RAY_TQDM_MAGIC,
            "x": self._x,
            "pos": self._position,
            "desc": self._desc,
            "total": self._total,
            "unit": self._unit,
            "ip": node_ip(),
            "pid": os.getpid(),
            "uuid": self._uuid,
            "closed": self._closed,
        }

    def _dump_state(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_flush < self._flush_interval_s:
            return
        self._last_flush = now
        if _drawn_here():
            driver_bars().update(self._get_state())
        else:
            builtins.print(json.dumps(self._get_state()), flush=True)

