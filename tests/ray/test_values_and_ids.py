"""Call arguments of plain values skip cloudpickle but read back the same; ids stay unique
across processes, forked ones included."""

from __future__ import annotations

import os
import pickle

import cloudpickle
import pytest

from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.objects import ids
from fray_ray._private.objects.serialization import deserialize, serialize

PLAIN = [
    ((1, "two", 3.0, None, True, b"\x00"), {"key": [1, 2]}),
    ((), {}),
    (("x" * 100_000,), {}),
]


@pytest.mark.parametrize("value", PLAIN)
def test_plain_arguments_read_back_as_cloudpickle_would(value: object) -> None:
    packed = serialize(value)
    assert deserialize(packed) == cloudpickle.loads(cloudpickle.dumps(value)) == value
    assert pickle.loads(packed.payload) == value and packed.contained_refs == () and not packed.buffers


def test_values_holding_refs_or_code_still_go_through_cloudpickle() -> None:
    ref = ObjectRef(ids.object_id_for(ids.new_task_id(), 1))
    held = serialize(((ref,), {}))
    assert held.contained_refs == (ref.binary(),)
    nested = serialize(((((((1,),),),),), {}))  # deeper than the plain check looks
    assert deserialize(nested) == ((((((1,),),),),), {})
    square = serialize(((lambda x: x * x,), {}))
    assert deserialize(square)[0][0](3) == 9


def test_task_ids_are_unique_here_and_in_a_forked_child() -> None:
    mine = {ids.new_task_id() for _ in range(10_000)}
    assert len(mine) == 10_000 and all(len(i) == ids.TASK_ID_SIZE for i in mine)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write its ids and leave at once
        os.close(read)
        os.write(write, b"".join(ids.new_task_id() for _ in range(100)))
        os._exit(0)
    os.close(write)
    mine |= {ids.new_task_id() for _ in range(100)}  # the same counts as the child's, without the fork hook
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    theirs = {data[i : i + ids.TASK_ID_SIZE] for i in range(0, len(data), ids.TASK_ID_SIZE)}
    assert len(theirs) == 100 and not theirs & mine
