"""Specs travel as a template, pickled once, plus the few fields each call sets.

From one call of a function or method to the next, a task's or an actor call's spec differs only
in its ids (`PER_CALL_FIELDS`), its arguments and whether its code travels. Pickling the rest
again for every `.remote()` cost a worker about 36 µs a task, and unpickling it cost the driver
about 57 µs, most of it rebuilding the same frozen dataclasses (pool key, runtime env,
resources). So a sender pickles a spec's template (the spec with those fields emptied) once per
distinct template and sends the same bytes each time; a receiver unpickles each distinct
template once and gives every spec of it a shallow copy. The per-call fields travel as plain
msgpack values beside it.

A template is looked up by what its fields hold, compared by content: scalars (by type too:
1, 1.0 and True pickle apart), tuples and dicts of such values, frozen fray_ray key types, and
classes. A template holding any other object (a scheduling strategy, say), which could change
in place, is pickled every time, as before. Both caches keep at most `TEMPLATES_KEPT`
templates of at most `TEMPLATE_MAX_BYTES` each, the oldest dropped first.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import cloudpickle

from fray_ray._private.core.cached_hash import CachedHash
from fray_ray._private.core.task_spec import CodeBlob
from fray_ray._private.objects.serialization import SCALAR_TYPES

#: Distinct templates each cache keeps (a program has a handful: one per function and options).
TEMPLATES_KEPT = 256
#: A template pickled larger than this (a runtime env with a large environment, say) is not
#: kept: it would cost more memory than its pickling costs time.
TEMPLATE_MAX_BYTES = 64 << 10


class _NotComparable(Exception):
    """A template field holding an object not compared by content: the template is not cached."""


def _key_part(value: Any) -> Any:
    """A hashable stand-in for `value` that is equal only for values that pickle alike."""
    kind = type(value)
    if kind in SCALAR_TYPES:
        return kind, value  # 1, 1.0 and True are equal but pickle differently
    if kind is tuple:
        return kind, tuple(_key_part(item) for item in value)
    if kind is dict:
        return kind, tuple((_key_part(k), _key_part(v)) for k, v in value.items())  # a dict pickles in this order
    if isinstance(value, (CachedHash, CodeBlob)) or isinstance(value, type):
        return kind, value  # frozen and compared by content (a class: by identity)
    raise _NotComparable(kind.__name__)


class _Oldest:
    """A dict bounded to `TEMPLATES_KEPT` entries that drops the oldest. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self._entries.get(key)

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > TEMPLATES_KEPT:
                del self._entries[next(iter(self._entries))]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_pickled = _Oldest()  # template key -> its pickle
_unpickled = _Oldest()  # a template's pickle -> the template


def per_call_fields(spec_class: type) -> tuple[str, ...]:
    """The fields each call of a spec class sets; empty for a class that names none (an actor's
    creation: each is its own template, so nothing is cached for it)."""
    fields: tuple[str, ...] = getattr(spec_class, "PER_CALL_FIELDS", ())
    return fields


def pickled_template(spec: Any, overrides: dict[str, Any]) -> bytes:
    """The pickle of `spec` with `overrides` (its arguments and code emptied) and without its
    per-call fields, made once per distinct template."""
    per_call = per_call_fields(type(spec))
    key: Any = None
    if per_call:
        try:
            key = (type(spec), tuple(
                (name, _key_part(overrides[name] if name in overrides else value))
                for name, value in spec.__dict__.items() if name not in per_call
            ))
        except _NotComparable:
            pass
    if key is not None and (found := _pickled.get(key)) is not None:
        return found  # type: ignore[no-any-return]
    blob = cloudpickle.dumps(dataclasses.replace(spec, **overrides, **dict.fromkeys(per_call)))
    if key is not None and len(blob) <= TEMPLATE_MAX_BYTES:
        _pickled.put(key, blob)
    return blob


def spec_from_template(blob: bytes, values: Sequence[Any]) -> Any:
    """A spec of the template pickled in `blob`, its per-call fields set to `values` (lists
    become tuples again: msgpack gives tuples back as lists). ValueError if they do not fit."""
    template = _unpickled.get(blob)
    if template is None:
        template = cloudpickle.loads(blob)
        per_call = per_call_fields(type(template))
        if not per_call:
            if values:
                raise ValueError(f"a {type(template).__name__} has no per-call fields")
            return template  # a template of its own: used as it is
        if len(blob) <= TEMPLATE_MAX_BYTES:
            _unpickled.put(bytes(blob), template)
    per_call = per_call_fields(type(template))
    if len(values) != len(per_call):
        raise ValueError(f"a {type(template).__name__} needs {len(per_call)} per-call values, not {len(values)}")
    spec = object.__new__(type(template))
    spec.__dict__.update(template.__dict__)
    for name, value in zip(per_call, values, strict=True):
        spec.__dict__[name] = tuple(value) if type(value) is list else value
    return spec


def forget_templates() -> None:
    """Drop both caches (tests)."""
    _pickled.clear()
    _unpickled.clear()
