"""Ids in Ray's formats: objects 28 bytes, tasks 24, actors 16, nodes 28 (hex is twice that)."""

from __future__ import annotations

import itertools
import os

OBJECT_ID_SIZE = 28
TASK_ID_SIZE = 24
ACTOR_ID_SIZE = 16
NODE_ID_SIZE = 28
JOB_ID_HEX = "01000000"


_PREFIX_SIZE = TASK_ID_SIZE - 8
_prefix = os.urandom(_PREFIX_SIZE)
_counter = itertools.count(1)


def _new_prefix() -> None:
    """A forked child must not repeat its parent's ids: it draws a prefix of its own."""
    global _prefix, _counter
    _prefix = os.urandom(_PREFIX_SIZE)
    _counter = itertools.count(1)


os.register_at_fork(after_in_child=_new_prefix)


def new_task_id() -> bytes:
    """A random 16-byte prefix per process and a counter: unique without a system call each
    (ids name work; they are never secrets)."""
    return _prefix + next(_counter).to_bytes(8, "little")


def object_id_for(task_id: bytes, index: int) -> bytes:
    """The id of return value `index` (1-based) of a task; index 0 is reserved for puts."""
    return task_id + index.to_bytes(4, "little")


def index_of(object_id: bytes) -> int:
    """The return index `object_id_for` put into `object_id` (0 for a put)."""
    return int.from_bytes(object_id[-4:], "little")


def new_put_id() -> bytes:
    return object_id_for(new_task_id(), 0)


def new_actor_id() -> bytes:
    return os.urandom(ACTOR_ID_SIZE)


def new_node_id() -> bytes:
    return os.urandom(NODE_ID_SIZE)


PLACEMENT_GROUP_ID_SIZE = 18


def new_placement_group_id() -> bytes:
    return os.urandom(PLACEMENT_GROUP_ID_SIZE)
