"""Messages larger than a frame's header may be: thousands of object arguments and results
travel (their pickle streams as out-of-band buffers), and a message that is really beyond the
stream's limits fails its call with an error naming the limit, never as a dead worker."""

from __future__ import annotations

import pytest

import fray_ray
from fray_ray._private.stream import frames
from fray_ray.exceptions import RaySystemError, RayTaskError


@fray_ray.remote
def _lengths(*blobs: bytes) -> list[int]:
    return [len(b) for b in blobs]


@fray_ray.remote(num_returns=2000)
def _many(size: int) -> tuple[bytes, ...]:
    return tuple(bytes([i % 256]) * size for i in range(2000))


@fray_ray.remote(max_calls=1, num_returns=200)  # the executor that lowered its own limit exits after this task
def _beyond_this_workers_limit() -> tuple[bytes, ...]:
    from fray_ray._private.stream import frames as worker_frames

    worker_frames.MAX_BUFFERS_PER_FRAME = 100
    return tuple(bytes([i % 256]) * 70_000 for i in range(200))  # 200 pickle streams as buffers


def test_ten_thousand_arguments_and_two_thousand_returns_larger_than_a_header(cluster_session) -> None:
    # 10,000 x 7 KB: 70 MB of inlined arguments, beyond the 64 MiB a header may hold
    refs = [fray_ray.put(bytes([i % 256]) * 7000) for i in range(10_000)]
    assert fray_ray.get(_lengths.remote(*refs)) == [7000] * 10_000
    values = fray_ray.get(_many.remote(35_000))  # 70 MB of results
    assert [v[:1] for v in values] == [bytes([i % 256]) for i in range(2000)]
    assert {len(v) for v in values} == {35_000}


def test_a_task_too_large_to_send_fails_naming_the_limit_and_the_task(cluster_session, monkeypatch) -> None:
    refs = [fray_ray.put(b"x" * 1000) for _ in range(300)]
    monkeypatch.setattr(frames, "MAX_HEADER_BYTES", 100_000)  # this driver's sends only
    with pytest.raises(RaySystemError, match=r"task _lengths cannot be sent to a worker: the 'execute' message "
                                             r"is too large to send: .* exceeds the stream's limit of 100000 bytes "
                                             r"\(MAX_HEADER_BYTES\)"):
        fray_ray.get(_lengths.remote(*refs), timeout=120)
    monkeypatch.undo()
    assert fray_ray.get(_lengths.remote(*refs[:3]), timeout=120) == [1000] * 3  # the session goes on


def test_a_result_too_large_to_send_fails_the_task_naming_the_limit(cluster_session) -> None:
    with pytest.raises(RayTaskError, match=r"the 'task_done' message is too large to send: its \d+ out-of-band "
                                           r"buffers exceed the stream's limit of 100 per frame"):
        fray_ray.get(_beyond_this_workers_limit.remote()[0], timeout=120)
    assert fray_ray.get(_lengths.remote(b"ab"), timeout=120) == [2]


@fray_ray.remote(num_cpus=0)
class _Holder:
    def lengths(self, *blobs: bytes) -> list[int]:
        return [len(b) for b in blobs]

    def lower_my_limit(self) -> None:
        from fray_ray._private.stream import frames as host_frames

        host_frames.MAX_BUFFERS_PER_FRAME = 100

    def many(self, count: int) -> list[bytes]:
        return [bytes([i % 256]) * 70_000 for i in range(count)]


def test_actor_calls_carry_thousands_of_arguments_and_fail_naming_the_limit(cluster_session, monkeypatch) -> None:
    holder = _Holder.remote()
    try:
        refs = [fray_ray.put(bytes([i % 256]) * 7000) for i in range(10_000)]
        assert fray_ray.get(holder.lengths.remote(*refs), timeout=300) == [7000] * 10_000

        monkeypatch.setattr(frames, "MAX_HEADER_BYTES", 100_000)  # this driver's sends only
        with pytest.raises(RaySystemError, match=r"actor call _Holder.lengths cannot be sent to its actor: the 'call' "
                                                 r"message is too large to send: .*\(MAX_HEADER_BYTES\)"):
            fray_ray.get(holder.lengths.remote(*refs[:300]), timeout=120)
        monkeypatch.undo()

        fray_ray.get(holder.lower_my_limit.remote(), timeout=120)
        with pytest.raises(RayTaskError, match=r"the 'call_done' message is too large to send: .*limit of 100 per frame"):
            fray_ray.get(holder.many.options(num_returns=200).remote(200)[0], timeout=120)
        assert fray_ray.get(holder.lengths.remote(b"abc"), timeout=120) == [3]  # the actor goes on
    finally:
        fray_ray.kill(holder)
