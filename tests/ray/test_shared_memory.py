"""Large task arguments reach workers on the driver's host through shared memory, are copied at
the call, and a block a worker may still read is never written again."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import fray_ray as ray
from fray_ray._private import messages
from fray_ray._private.core import runtime_state
from fray_ray._private.messages import GetObjects, Objects, ReturnShared
from fray_ray._private.objects.serialization import SerializedValue, deserialize, serialize
from fray_ray._private.objects.shared_memory import (
    SHARED_MEMORY_DIR_ENV,
    WORKER_BORROWS,
    BorrowedBlocks,
    LentBlocks,
    SharedBlock,
    allocator,
    host_identity,
)
from fray_ray._private.stream.buffers import MIN_POOLED, BufferPool, in_use
from fray_ray._private.stream.protocol import Connection
from fray_ray._private.workers.runtime import WorkerRuntime

SIZE = 8 << 20  # well above MIN_POOLED, small enough for a loaded 2-core machine


def _driver_files() -> list[str]:
    """The shared-memory files this test process (the driver) has created."""
    prefix = f"fray_ray-{os.stat('/proc/self/ns/pid').st_ino}-{os.getpid()}-"
    return [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


def _exporter(array: np.ndarray) -> str:
    """The type of the object whose memory `array` reads."""
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    while isinstance(base, memoryview):
        base = base.obj
    return type(base).__name__


def _kept_module() -> types.ModuleType:
    return sys.modules.setdefault("_fray_ray_test_kept", types.ModuleType("_fray_ray_test_kept"))


# ---- the module alone -----------------------------------------------------------------------


def test_a_block_is_a_private_file_removed_when_the_block_is_collected(tmp_path: Path) -> None:
    block = SharedBlock.create(str(tmp_path), MIN_POOLED)
    path = tmp_path / block.name
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_size == MIN_POOLED
    memoryview(block)[:3] = b"abc"
    assert path.read_bytes()[:3] == b"abc"  # the file is the block's memory
    del block
    gc.collect()
    assert not path.exists()


def test_a_directory_that_cannot_hold_blocks_gives_private_memory(tmp_path: Path) -> None:
    allocate = allocator(str(tmp_path / "missing"))
    assert type(allocate(MIN_POOLED)) is bytearray
    assert allocator(None) is bytearray


def test_files_of_dead_drivers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    namespace = os.stat("/proc/self/ns/pid").st_ino
    stale = tmp_path / f"fray_ray-{namespace}-{int(dead.stdout)}-{'0' * 32}"
    live = tmp_path / f"fray_ray-{namespace}-{os.getppid()}-{'1' * 32}"
    elsewhere = tmp_path / f"fray_ray-{namespace + 1}-{int(dead.stdout)}-{'2' * 32}"  # another container's
    other = tmp_path / "not-ours"
    for path in (stale, live, elsewhere, other):
        path.write_bytes(b"x")
    block = SharedBlock.create(str(tmp_path), MIN_POOLED)
    assert not stale.exists() and live.exists() and elsewhere.exists() and other.exists()
    del block


def test_shutdown_removes_the_blocks_of_processes_killed_during_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_shutdown: None
) -> None:
    monkeypatch.setenv(SHARED_MEMORY_DIR_ENV, str(tmp_path))
    ray.init(num_cpus=1)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    namespace = os.stat("/proc/self/ns/pid").st_ino
    killed = tmp_path / f"fray_ray-{namespace}-{int(dead.stdout)}-{'3' * 32}"  # after the session's first sweep
    live = tmp_path / f"fray_ray-{namespace}-{os.getppid()}-{'4' * 32}"
    killed.write_bytes(b"x")
    live.write_bytes(b"x")
    ray.shutdown()
    assert not killed.exists() and live.exists()


def test_identities_differ_between_directories(tmp_path: Path) -> None:
    assert host_identity("/dev/shm") and host_identity("/dev/shm") == host_identity("/dev/shm")
    assert host_identity(str(tmp_path)) != host_identity("/dev/shm")
    assert host_identity(None) == ""


def _value_on(block: SharedBlock, size: int) -> SerializedValue:
    return SerializedValue(b"payload", [b"small", memoryview(block)[:size].toreadonly()])


def test_a_lent_block_stays_referenced_until_its_worker_returns_it(tmp_path: Path) -> None:
    holder = [SharedBlock.create(str(tmp_path), MIN_POOLED)]  # the one reference, as in a StoredValue
    lent_blocks = LentBlocks()
    sent, lent = lent_blocks.lend("worker-1", [_value_on(holder[0], 1000)])
    assert [bytes(b) for b in sent[0].buffers] == [b"small", b""]  # the placeholder goes instead
    assert len(lent) == 1 and (lent[0].index, lent[0].name, lent[0].size) == (1, holder[0].name, 1000)
    del sent
    gc.collect()
    assert in_use(holder, 0)  # the lease holds a view: the stored value counts as pinned
    lent_blocks.returned("worker-2", [lent[0].lease])  # another connection's return is ignored
    lent_blocks.returned("worker-1", ["not a lease", None])
    assert lent_blocks.outstanding("worker-1") == 1
    lent_blocks.returned("worker-1", [lent[0].lease])
    assert lent_blocks.outstanding() == 0 and not in_use(holder, 0)


def test_blocks_lent_to_a_closed_connection_are_never_reused(tmp_path: Path) -> None:
    pool = BufferPool(allocate=allocator(str(tmp_path)))
    block = pool.copy(memoryview(np.ones(MIN_POOLED, np.uint8)))
    assert isinstance(block, SharedBlock)
    lent_blocks = LentBlocks()
    sent, _ = lent_blocks.lend("worker", [_value_on(block, MIN_POOLED)])
    del sent
    lent_blocks.connection_closed("worker")
    assert block.tainted and lent_blocks.outstanding() == 0
    assert pool.give_back(block) is False


def test_a_worker_reads_a_block_in_place_and_returns_it_once_unused(tmp_path: Path) -> None:
    block = SharedBlock.create(str(tmp_path), MIN_POOLED)
    memoryview(block)[:8] = np.arange(8, dtype=np.uint8).tobytes()
    borrowed = BorrowedBlocks()
    borrowed.use_directory(str(tmp_path))
    returned: list[tuple[object, list[int]]] = []
    value = SerializedValue(b"p", [b"", b"tail"])
    [attached] = borrowed.attach("conn", [value], [[0, block.name, 8, 7]], lambda c, leases: returned.append((c, leases)))
    view = attached.buffers[0]
    assert bytes(view) == bytes(range(8)) and view.readonly and bytes(attached.buffers[1]) == b"tail"
    array = np.frombuffer(view, dtype=np.uint8)
    del attached, view, value
    assert borrowed.sweep() == {}  # the array still reads it
    memoryview(block)[0] = 99
    assert array[0] == 99  # in place: the same memory, not a copy
    del array
    assert borrowed.sweep() == {"conn": [7]} and borrowed.borrowed == 0
    borrowed.return_free(lambda c, leases: returned.append((c, leases)))
    assert returned == []  # nothing more to return


_BLOCK_NAME = "fray_ray-1-2-" + "0" * 32


@pytest.mark.parametrize("name", ["../../etc/passwd", "fray_ray-1-2-zz", _BLOCK_NAME + "/x", "/dev/shm/" + _BLOCK_NAME])
def test_a_worker_opens_only_block_names_and_returns_the_leases_it_cannot_read(tmp_path: Path, name: str) -> None:
    borrowed = BorrowedBlocks()
    borrowed.use_directory(str(tmp_path))
    returned: list[list[int]] = []
    with pytest.raises(OSError, match="shared memory"):
        borrowed.attach("conn", [SerializedValue(b"p", [b""])], [[0, name, 8, 3]], lambda c, leases: returned.append(leases))
    assert returned == [[3]] and borrowed.borrowed == 0


def test_a_worker_refuses_a_size_beyond_the_file(tmp_path: Path) -> None:
    block = SharedBlock.create(str(tmp_path), MIN_POOLED)
    borrowed = BorrowedBlocks()
    borrowed.use_directory(str(tmp_path))
    with pytest.raises(OSError, match="holds"):
        borrowed.attach("conn", [SerializedValue(b"p", [b""])], [[0, block.name, MIN_POOLED + 1, 1]], lambda c, l: None)
    del block


# ---- through real worker processes ----------------------------------------------------------


def test_a_large_argument_is_read_in_place_and_one_block_serves_calls_in_turn(cluster_session: object) -> None:
    @ray.remote(runtime_env={"env_vars": {"FRAY_RAY_TEST_POOL": "shared-memory"}})
    def summed(array: np.ndarray) -> tuple[int, str, bool]:
        return int(array.sum()), _exporter(array), array.flags.writeable

    driver = runtime_state.current()
    lent_before = driver.lent_blocks.outstanding()
    before = set(_driver_files())
    answers = [ray.get(summed.remote(np.full(SIZE, value, np.uint8))) for value in range(1, 5)]
    assert [total for total, _, _ in answers] == [value * SIZE for value in range(1, 5)]
    assert {kind for _, kind, _ in answers} == {"c_char_Array_8388608"}  # the driver's shared block
    assert not any(writeable for _, _, writeable in answers)
    assert len(set(_driver_files()) - before) <= 1  # each call reused the block the last one returned
    assert driver.lent_blocks.outstanding() == lent_before  # every lease came back


@pytest.mark.parametrize("size", [1000, SIZE])  # sent with the task, or stored as an object
def test_the_call_copies_its_arguments(cluster_session: object, size: int) -> None:
    """As in Ray: changing an array after `.remote()` returns does not change what the task sees,
    even when the task waits in a queue behind others."""

    @ray.remote(runtime_env={"env_vars": {"FRAY_RAY_TEST_POOL": "copied-arguments"}})
    def first(array: np.ndarray) -> int:
        return int(array[0])

    array = np.ones(size, np.uint8)
    refs = [first.remote(array) for _ in range(6)]
    array[0] = 42
    assert ray.get(refs) == [1] * 6


def test_a_block_a_worker_keeps_is_not_written_by_later_arguments(cluster_session: object) -> None:
    @ray.remote(runtime_env={"env_vars": {"FRAY_RAY_TEST_POOL": "kept-argument"}})
    def keep(array: np.ndarray) -> int:
        _kept_module().array = array  # lives on in the executor's process
        return os.getpid()

    @ray.remote(runtime_env={"env_vars": {"FRAY_RAY_TEST_POOL": "kept-argument"}})
    def kept_sum_after(array: np.ndarray) -> tuple[int, int, int]:
        kept = _kept_module().array
        return os.getpid(), int(kept.sum()), int(array.sum())

    lent_blocks = runtime_state.current().lent_blocks
    lent_before = lent_blocks.outstanding()
    pid = ray.get(keep.remote(np.full(SIZE, 3, np.uint8)))
    assert lent_blocks.outstanding() == lent_before + 1  # the kept argument's lease is still out
    for value in (5, 7):
        other_pid, kept_total, total = ray.get(kept_sum_after.remote(np.full(SIZE, value, np.uint8)))
        assert kept_total == 3 * SIZE and total == value * SIZE
        assert other_pid == pid  # one process: the kept array was read in the one that kept it


def test_a_worker_on_another_host_gets_the_bytes_over_its_stream(cluster_session: object, tmp_path: Path) -> None:
    """A worker whose shared-memory directory is not the driver's (another host, another
    container) cannot open the driver's files: its arguments come down its stream."""

    @ray.remote(runtime_env={"env_vars": {SHARED_MEMORY_DIR_ENV: str(tmp_path)}})
    def summed(array: np.ndarray) -> tuple[int, str]:
        return int(array.sum()), _exporter(array)

    lent_blocks = runtime_state.current().lent_blocks
    lent_before = lent_blocks.outstanding()
    answers = [ray.get(summed.remote(np.full(SIZE, value, np.uint8))) for value in (2, 3)]
    assert answers == [(2 * SIZE, "bytearray"), (3 * SIZE, "bytearray")]
    assert lent_blocks.outstanding() == lent_before  # nothing was lent to it


def test_a_call_queued_before_its_actor_is_ready_reads_its_argument_as_it_was(cluster_session: object) -> None:
    @ray.remote(num_cpus=0, max_concurrency=2)  # open() runs while wait() blocks
    class Gate:
        def __init__(self) -> None:
            import threading

            self.opened = threading.Event()

        def open(self) -> None:
            self.opened.set()

        def wait(self) -> None:
            self.opened.wait()

    @ray.remote(num_cpus=0)
    class Reader:
        def __init__(self, gate: object) -> None:
            ray.get(gate.wait.remote())  # type: ignore[attr-defined]

        def first(self, array: np.ndarray) -> int:
            return int(array[0])

    gate = Gate.remote()
    reader = Reader.remote(gate)
    array = np.ones(SIZE, np.uint8)
    refs = [reader.first.remote(array) for _ in range(3)]  # queued: the reader is not ready
    array[0] = 42
    ray.get(gate.open.remote())
    assert ray.get(refs) == [1] * 3
    ray.kill(reader)
    ray.kill(gate)


def test_a_worker_that_cannot_open_a_lent_file_asks_again_for_the_bytes(
    tcp_pair: tuple[socket.socket, socket.socket], tmp_path: Path
) -> None:
    """A driver (here a stand-in on a real connection) that lends a file the worker cannot open:
    the worker returns the lease and asks again, with shared memory off from then on."""
    ours, theirs = tcp_pair
    object_id = b"\x01" * 28
    payload = serialize(np.full(MIN_POOLED, 9, np.uint8))
    asked: list[bool] = []
    returned: list[list[int]] = []

    def get(connection: Connection, message_id: int | None, request: GetObjects) -> None:
        asked.append(request.shared)
        if request.shared:
            missing = [[0, _BLOCK_NAME, MIN_POOLED, 5]]  # no such file
            found = [SerializedValue(payload.payload, [b""])]
            messages.reply(connection, message_id, Objects([object_id], found, missing))
        else:
            messages.reply(connection, message_id, Objects([object_id], [payload]))

    def return_shared(connection: Connection, message_id: int | None, message: ReturnShared) -> None:
        returned.append(message.leases)

    driver_side = Connection(theirs, name="driver").start(messages.handlers({GetObjects: get, ReturnShared: return_shared}))
    worker_side = Connection(ours, name="worker").start({})
    previous = WORKER_BORROWS.directory
    WORKER_BORROWS.use_directory(str(tmp_path))
    try:
        runtime = WorkerRuntime(worker_side)
        runtime.reads_shared_memory = True
        value = runtime.fetch([object_id], timeout=30)[object_id]
        assert int(deserialize(value).sum()) == 9 * MIN_POOLED
        assert asked == [True, False] and runtime.reads_shared_memory is False
        assert returned == [[5]]  # sent before the second ask, on the same connection: handled first
    finally:
        WORKER_BORROWS.use_directory(previous)
        worker_side.close()
        driver_side.close()


def test_an_actor_reads_arguments_in_place_and_a_kept_one_is_never_overwritten(cluster_session: object) -> None:
    @ray.remote
    class Receiver:
        def __init__(self) -> None:
            self.kept: np.ndarray | None = None

        def take(self, array: np.ndarray, keep: bool) -> tuple[str, int, int]:
            if keep:
                self.kept = array
            return _exporter(array), int(array.sum()), int(self.kept.sum()) if self.kept is not None else 0

    lent_blocks = runtime_state.current().lent_blocks
    receiver = Receiver.remote()
    ray.get(receiver.__ray_ready__.remote())
    lent_before = lent_blocks.outstanding()
    before = set(_driver_files())
    answers = [ray.get(receiver.take.remote(np.full(SIZE, value, np.uint8), value == 2)) for value in (1, 2, 3, 4)]
    assert [kind for kind, _, _ in answers] == ["c_char_Array_8388608"] * 4
    assert [total for _, total, _ in answers] == [value * SIZE for value in (1, 2, 3, 4)]
    assert [kept for _, _, kept in answers] == [0, 2 * SIZE, 2 * SIZE, 2 * SIZE]  # never overwritten
    assert lent_blocks.outstanding() == lent_before + 1  # only the kept one is still out
    assert len(set(_driver_files()) - before) <= 2  # the kept block, and one the others shared
    ray.kill(receiver)


def test_an_async_actor_and_a_constructor_get_large_arguments_as_they_were_at_the_call(cluster_session: object) -> None:
    @ray.remote
    class AsyncReceiver:
        def __init__(self, array: np.ndarray) -> None:
            self.first = int(array[0])

        async def total(self, array: np.ndarray) -> tuple[int, int, str]:
            return self.first, int(array.sum()), _exporter(array)

    array = np.full(SIZE, 5, np.uint8)
    receiver = AsyncReceiver.remote(array)  # its process is not running yet: the arguments wait
    array[0] = 42
    answers = ray.get([receiver.total.remote(np.full(SIZE, value, np.uint8)) for value in (1, 2)])
    assert answers == [(5, SIZE, "c_char_Array_8388608"), (5, 2 * SIZE, "c_char_Array_8388608")]
    ray.kill(receiver)
