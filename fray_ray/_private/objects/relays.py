"""Spreading a large object to many hosts: each host fetches it once, from any host that has it.

A 1 GiB array that sixteen hosts read would otherwise leave the process that holds it sixteen
times. As Ray's object manager does, the owner turns each read into one more source instead. The
first `ORIGIN_FANOUT` hosts that read an object of at least `RELAY_MIN` bytes fetch it from its
origin (the worker that holds it, or the driver's own store); from the second host on, each
keeps a copy (a *relay*) that it serves onward (the first does not: most objects have one
reader, which should not pin a copy). Later readers are sent to a relay:

- one on their own host if there is one (they map its shared-memory files: no transfer at all);
- otherwise the shallowest relay with room (at most `RELAY_FANOUT` readers each), so copies
  spread as a tree rather than a chain, and the reader becomes a relay for its host.

A relay may still be fetching when a reader is sent to it; its holder server answers that reader
once the copy is in (`HeldObjects.wait_for`). A relay that fails (its fetch failed, it could not
keep the copy, its process ended) is reported by its readers, dropped, and they are sent
elsewhere. Copies are released when the owner frees the object.

This module is the owner's bookkeeping only: which relays each object has, on which host, and
how loaded. It does no I/O. Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fray_ray._private.objects.remote_values import RemoteResult, held_entry, split_remote
from fray_ray._private.objects.serialization import SerializedValue

#: Objects smaller than this are fetched from their origin by everyone (cheap enough to resend).
RELAY_MIN = 8 << 20
#: Hosts that fetch an object from its origin before readers are sent to relays.
ORIGIN_FANOUT = 2
#: Readers a relay is sent before deeper relays are preferred to it.
RELAY_FANOUT = 2


@dataclass(frozen=True)
class Route:
    """Where a reader fetches one object: `source` None for the origin, else a relay's
    address; `keep` says the reader must keep a copy and serve it to readers sent to it."""

    source: str | None = None
    keep: bool = False


FROM_ORIGIN = Route()


@dataclass
class _Relay:
    host: str
    depth: int  # transfers between the origin and this copy
    readers: int = 0


@dataclass
class _Spread:
    """One object's relays (by address) and how many readers its origin was given."""

    origin_readers: int = 0
    relays: dict[str, _Relay] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)  # reported failed: may still hold a copy


class RelayPlan:
    """The owner's record of which processes keep a copy of which large objects."""

    def __init__(self, min_size: int = RELAY_MIN, origin_fanout: int = ORIGIN_FANOUT) -> None:
        self.min_size = min_size
        self.origin_fanout = origin_fanout
        self._lock = threading.Lock()  # guards _spreads
        self._spreads: dict[bytes, _Spread] = {}

    def route(self, object_id: bytes, size: int, *, origin_host: str, reader_host: str,
              reader_relay: str | None, failed: Iterable[str] = ()) -> Route:
        """Where the reader on `reader_host` (serving at `reader_relay`, or None if it cannot
        fetch from relays or serve) fetches `object_id` from; `failed` names relays it could
        not fetch it from."""
        if size < self.min_size or reader_relay is None or (reader_host and reader_host == origin_host):
            return FROM_ORIGIN
        with self._lock:
            spread = self._spreads.setdefault(object_id, _Spread())
            for address in failed:
                if spread.relays.pop(address, None) is not None:
                    spread.dropped.add(address)
            spread.relays.pop(reader_relay, None)  # asking again: whatever it had is gone
            same_host = [(a, r) for a, r in spread.relays.items() if reader_host and r.host == reader_host]
            if same_host:  # mapped from a neighbour: no transfer, and no copy of its own needed
                address, relay = min(same_host, key=lambda pair: pair[1].readers)
                relay.readers += 1
                return Route(address)
            if not spread.origin_readers:  # the first host to read it: most objects have no second
                spread.origin_readers = 1
                return FROM_ORIGIN
            if spread.relays and spread.origin_readers >= self.origin_fanout:
                # The shallowest relay with room, so copies spread as a tree, not a chain.
                address, relay = min(spread.relays.items(),
                                     key=lambda pair: (pair[1].readers >= RELAY_FANOUT, pair[1].depth, pair[1].readers))
                relay.readers += 1
                source, depth = address, relay.depth + 1
            else:
                spread.origin_readers += 1
                source, depth = None, 1
            spread.relays[reader_relay] = _Relay(reader_host, depth)
            return Route(source, keep=True)

    def relay_gone(self, relay: str) -> None:
        """The process serving at `relay` ended: none of its copies exist any more."""
        with self._lock:
            for spread in self._spreads.values():
                spread.relays.pop(relay, None)
                spread.dropped.discard(relay)

    def forget(self, object_ids: Iterable[bytes]) -> list[tuple[str, bytes]]:
        """These objects were freed (or will be made again): the (relay, object id) copies to release."""
        if not self._spreads:  # the common case, checked without the lock: nothing was spread
            return []
        copies: list[tuple[str, bytes]] = []
        with self._lock:
            for object_id in object_ids:
                spread = self._spreads.pop(object_id, None)
                if spread is not None:
                    copies.extend((address, object_id) for address in {*spread.relays, *spread.dropped})
        return copies

    def relays_of(self, object_id: bytes) -> list[str]:
        """The addresses keeping a copy of `object_id` now."""
        with self._lock:
            spread = self._spreads.get(object_id)
            return list(spread.relays) if spread is not None else []


@dataclass
class Reads:
    """One reader's answer, routed: `values` to send (held ones empty), `held` entries
    ([index, address, size]), `copies` (ids whose address is a relay) and `keep` (ids the
    reader is to keep a copy of)."""

    values: list[SerializedValue]
    held: list[list[Any]]
    copies: list[bytes]
    keep: list[bytes]


def route_reads(plan: RelayPlan, ids: Sequence[bytes], values: Sequence[SerializedValue], *, own_host: str,
                host_of: Callable[[str], str], reader_host: str, reader_relay: str | None,
                failed: Sequence[Any] = ()) -> Reads:
    """Route the reads of `values` (the owner's stored values of `ids`: its own, or the
    `RemoteResult`s of values other processes hold) for one reader. `own_host` is the owner's
    host, `host_of(holder)` a holder's; `failed` the reader's [object id, relay] reports."""
    failed_at: dict[bytes, list[str]] = {}
    for pair in failed:
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], bytes) and isinstance(pair[1], str):
            failed_at.setdefault(pair[0], []).append(pair[1])
    sent, held = split_remote(values)  # by default: held values from their holders, the rest in the answer
    reads = Reads(sent, held, [], [])
    held_at = {entry[0]: entry for entry in held}
    for index, (object_id, value) in enumerate(zip(ids, values)):
        if value.is_error or value.size < plan.min_size or reader_relay is None:
            continue
        origin = host_of(value.holder) if isinstance(value, RemoteResult) else own_host
        route = plan.route(object_id, value.size, origin_host=origin, reader_host=reader_host,
                           reader_relay=reader_relay, failed=failed_at.get(object_id, ()))
        if route.keep:
            reads.keep.append(object_id)
        if route.source is None:
            continue
        reads.copies.append(object_id)  # fetched from a copy instead
        if index in held_at:
            held_at[index][1] = route.source
        else:
            reads.held.append(held_entry(index, route.source, value.size))
            reads.values[index] = SerializedValue(b"", (), value.contained_refs, False)
    return reads
