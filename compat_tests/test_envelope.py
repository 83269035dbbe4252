"""Ray's single-node scalability envelope, at sizes a CI machine runs quickly: a task takes
10,000 object arguments, returns 3,000 objects, and gets 10,000 objects at once, and every value
arrives intact. Each call moves about 70 MB, more than one message's header may hold.
"""

from __future__ import annotations

import hashlib

from compat_tests._backend import ray

ARGS = 10_000
RETURNS = 3_000
ARG_BYTES = 7_000
RETURN_BYTES = 25_000


def _blob(i: int, size: int) -> bytes:
    return i.to_bytes(4, "little") * (size // 4)


def _digest(blobs) -> str:
    digest = hashlib.sha256()
    for blob in blobs:
        digest.update(blob)
    return digest.hexdigest()


@ray.remote
def _digest_of_arguments(*blobs):
    return len(blobs), _digest(blobs)


@ray.remote(num_returns=RETURNS)
def _many_returns():
    return tuple(_blob(i, RETURN_BYTES) for i in range(RETURNS))


@ray.remote
def _digest_of_got(refs):
    return len(refs), _digest(ray.get(refs))


def test_envelope__ten_thousand_object_arguments_to_one_task(ray_start_regular_shared):
    blobs = [_blob(i, ARG_BYTES) for i in range(ARGS)]
    refs = [ray.put(blob) for blob in blobs]
    assert ray.get(_digest_of_arguments.remote(*refs)) == (ARGS, _digest(blobs))


def test_envelope__three_thousand_returns_from_one_task(ray_start_regular_shared):
    refs = _many_returns.remote()
    assert len(refs) == RETURNS
    values = ray.get(refs)
    assert values[0] == _blob(0, RETURN_BYTES) and values[-1] == _blob(RETURNS - 1, RETURN_BYTES)
    assert _digest(values) == _digest(_blob(i, RETURN_BYTES) for i in range(RETURNS))


def test_envelope__ten_thousand_objects_in_one_get_inside_a_task(ray_start_regular_shared):
    blobs = [_blob(i, ARG_BYTES) for i in range(ARGS)]
    refs = [ray.put(blob) for blob in blobs]
    assert ray.get(_digest_of_got.remote(refs)) == (ARGS, _digest(blobs))
    assert _digest(ray.get(refs)) == _digest(blobs)
