"""A separate process serving test actors over ActorService; prints its URL, exits on stdin EOF."""

from __future__ import annotations

import sys
import threading

from fray_ray.iris.actor_server import ActorServer, operation_cancelled


class NotPicklableError(Exception):
    def __init__(self, lock: threading.Lock) -> None:
        super().__init__("carries a lock")
        self.lock = lock

    def __reduce__(self):  # noqa: D105 - make pickling fail loudly
        raise TypeError("cannot pickle this error")


class Calculator:
    """A small stateful actor."""

    def __init__(self) -> None:
        self.total = 0
        self.started = threading.Event()

    def add(self, x: int, y: int = 0) -> int:
        """Add x (and y) to the running total."""
        self.total += x + y
        return self.total

    def divide(self, x: float, y: float) -> float:
        return x / y

    def fail_unpicklably(self) -> None:
        raise NotPicklableError(threading.Lock())

    def wait_until_cancelled(self) -> str:
        self.started.set()
        while not operation_cancelled():
            self.started.wait(0.01)
        return "cancelled"

    def echo(self, value: object) -> object:
        return value


def main() -> None:
    server = ActorServer().start()
    server.register("/test/job/calculator-0", Calculator(), max_concurrency=1)
    print(server.url, flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
