"""object_store_memory is a real limit: values beyond it spill to disk, or ObjectStoreFullError."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import fray_ray as ray
from fray_ray._private.core import runtime_state
from fray_ray._private.objects.object_store import ObjectStoreConfig
from fray_ray._private.objects.spilling import OWNER_FILE, SPILL_PREFIX
from fray_ray.exceptions import ObjectStoreFullError, RayTaskError

MiB = 1024 * 1024
LIMIT = 48 * MiB


def _array(index: int, mib: int = 12) -> np.ndarray:
    return np.full(mib * MiB // 8, index, dtype=np.int64)


def _spill_config(directory: str) -> dict:
    return {"object_spilling_config": json.dumps({"type": "filesystem", "params": {"directory_path": directory}})}


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def store_dir(tmp_path):
    yield str(tmp_path)


def test_objects_larger_than_the_store_together_spill_and_come_back(store_dir) -> None:
    ray.init(num_cpus=1, object_store_memory=LIMIT, _system_config=_spill_config(store_dir))
    try:
        runtime = runtime_state.current()
        store = runtime.objects.store
        assert ray.cluster_resources()["object_store_memory"] == LIMIT
        refs = [ray.put(_array(i)) for i in range(10)]  # 120 MiB through a 48 MiB store
        assert store.used <= LIMIT
        spilled = runtime.objects.spilled_ids()
        assert len(spilled) >= 6
        files = store.spill_dir.files()
        assert len(files) == len(spilled)
        assert all(f.startswith(os.path.join(store_dir, SPILL_PREFIX + runtime.session_name)) for f in files)
        for index, ref in enumerate(refs):
            value = ray.get(ref)
            assert value.shape == (12 * MiB // 8,) and int(value[0]) == index and int(value[-1]) == index
            assert value.flags.writeable is False
        del value

        @ray.remote
        def total(array: np.ndarray) -> int:
            return int(array.sum())

        # Workers fetch spilled objects from the driver too.
        sums = ray.get([total.remote(ref) for ref in refs])
        assert sums == [i * (12 * MiB // 8) for i in range(10)]

        @ray.remote
        def make(index: int) -> np.ndarray:
            return _array(index)

        results = [make.remote(i) for i in range(6)]  # task results beyond the limit spill as well
        assert [int(ray.get(r)[-1]) for r in results] == list(range(6))
        assert store.used <= LIMIT

        # Puts only: once freed, their files are gone.
        extra = [ray.put(_array(100 + i)) for i in range(6)]
        extra_ids = {r.binary() for r in extra}
        _wait_for(lambda: extra_ids & set(runtime.objects.spilled_ids()), "an extra put to be spilled")
        extra_files = [f for f in store.spill_dir.files() if bytes.fromhex(os.path.basename(f)) in extra_ids]
        assert extra_files
        del extra
        runtime.references.flush()
        _wait_for(lambda: not any(os.path.exists(f) for f in extra_files), "freed objects' spill files to go")
        spill_path = store.spill_dir.path
        assert spill_path is not None and os.path.isdir(spill_path)
    finally:
        ray.shutdown()
    assert not os.path.exists(spill_path)
    assert os.listdir(store_dir) == []


def test_spills_go_to_the_system_temp_dir_by_default() -> None:
    ray.init(num_cpus=1, local_mode=True, object_store_memory=LIMIT)
    try:
        runtime = runtime_state.current()
        refs = [ray.put(_array(i)) for i in range(6)]
        path = runtime.objects.store.spill_dir.path
        assert path is not None
        assert os.path.dirname(path) == tempfile.gettempdir()
        assert os.path.basename(path).startswith(f"{SPILL_PREFIX}{runtime.session_name}-")
        with open(os.path.join(path, OWNER_FILE)) as owner:
            assert int(owner.read()) == os.getpid()
        assert [int(ray.get(r)[0]) for r in refs] == list(range(6))
    finally:
        ray.shutdown()
    assert not os.path.exists(path)


def test_with_spilling_off_a_put_that_does_not_fit_raises_and_loses_nothing(store_dir) -> None:
    ray.init(num_cpus=1, local_mode=True, object_store_memory=LIMIT,
             _system_config={**_spill_config(store_dir), "automatic_object_spilling_enabled": False})
    try:
        runtime = runtime_state.current()
        kept = [ray.put(_array(i)) for i in range(3)]  # 36 MiB of 48
        with pytest.raises(ObjectStoreFullError, match="spilling is disabled"):
            ray.put(_array(3))
        assert runtime.objects.store.used <= LIMIT
        assert [int(ray.get(r)[0]) for r in kept] == [0, 1, 2]
        assert runtime.objects.spilled_ids() == [] and os.listdir(store_dir) == []
        del kept[0]
        runtime.references.flush()
        assert int(ray.get(ray.put(_array(7)))[0]) == 7  # room again once something is freed
    finally:
        ray.shutdown()


def test_spilling_off_through_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("RAY_automatic_object_spilling_enabled", "0")
    config = ObjectStoreConfig.from_init(LIMIT, None, 1 << 30)
    assert config.spilling is False and config.limit == LIMIT
    # _system_config wins over the environment, as in Ray.
    assert ObjectStoreConfig.from_init(None, {"automatic_object_spilling_enabled": True}, 1 << 30).spilling is True


def test_one_object_larger_than_the_whole_store_is_refused(store_dir) -> None:
    ray.init(num_cpus=1, local_mode=True, object_store_memory=LIMIT, _system_config=_spill_config(store_dir))
    try:
        small = ray.put(_array(1))
        with pytest.raises(ObjectStoreFullError, match="larger than the whole object store"):
            ray.put(np.zeros(LIMIT + 1, dtype=np.uint8))
        assert int(ray.get(small)[0]) == 1
    finally:
        ray.shutdown()


def test_a_task_result_larger_than_the_store_raises_at_get(store_dir) -> None:
    ray.init(num_cpus=1, object_store_memory=LIMIT, _system_config=_spill_config(store_dir))
    try:
        @ray.remote
        def huge() -> np.ndarray:
            return np.zeros(LIMIT + MiB, dtype=np.uint8)

        @ray.remote
        def put_huge() -> None:
            ray.put(np.zeros(LIMIT + MiB, dtype=np.uint8))

        @ray.remote
        class Maker:
            def huge(self) -> np.ndarray:
                return np.zeros(LIMIT + MiB, dtype=np.uint8)

            def small(self) -> int:
                return 1

        with pytest.raises(ObjectStoreFullError, match="larger than the whole object store"):
            ray.get(huge.remote())
        maker = Maker.remote()
        with pytest.raises(ObjectStoreFullError, match="A result of huge"):
            ray.get(maker.huge.remote())
        assert ray.get(maker.small.remote()) == 1  # the actor lives on
        with pytest.raises(RayTaskError) as raised:  # a put inside a task fails in the task
            ray.get(put_huge.remote())
        assert isinstance(raised.value, ObjectStoreFullError)
        assert ray.get(ray.put("still fine")) == "still fine"
    finally:
        ray.shutdown()


def test_a_value_in_use_after_get_is_never_spilled(store_dir) -> None:
    ray.init(num_cpus=1, local_mode=True, object_store_memory=LIMIT, _system_config=_spill_config(store_dir))
    try:
        runtime = runtime_state.current()
        pinned_ref = ray.put(_array(42))
        held = ray.get(pinned_ref)  # a zero-copy view of the stored buffer
        others = [ray.put(_array(i)) for i in range(8)]
        spilled = set(runtime.objects.spilled_ids())
        assert pinned_ref.binary() not in spilled and len(spilled) >= 5
        assert int(held[0]) == 42 and int(held[-1]) == 42
        assert [int(ray.get(r)[0]) for r in others] == list(range(8))
        # Freed while still in use: its memory still counts until the array is gone.
        del pinned_ref
        runtime.references.flush()
        used_while_held = runtime.objects.store.used
        assert used_while_held >= held.nbytes
        assert int(held.sum()) == 42 * held.size
        del held
        ray.put(b"x")  # any admission sweeps values that are no longer used
        assert runtime.objects.store.used <= used_while_held - 12 * MiB
    finally:
        ray.shutdown()


def test_when_the_disk_refuses_the_put_raises(store_dir) -> None:
    ray.init(num_cpus=1, local_mode=True, object_store_memory=LIMIT,
             _system_config={**_spill_config(store_dir), "local_fs_capacity_threshold": 0.0})
    try:
        kept = [ray.put(_array(i)) for i in range(3)]
        with pytest.raises(ObjectStoreFullError, match="could not be spilled: the disk"):
            ray.put(_array(3))
        assert [int(ray.get(r)[0]) for r in kept] == [0, 1, 2]
    finally:
        ray.shutdown()


def test_bad_settings_fail_at_init() -> None:
    with pytest.raises(TypeError, match="object_store_memory"):
        ray.init(local_mode=True, object_store_memory="lots")
    with pytest.raises(ValueError, match="positive"):
        ray.init(local_mode=True, object_store_memory=0)
    with pytest.raises(ValueError, match="only 'filesystem'"):
        ray.init(local_mode=True, _system_config={"object_spilling_config": json.dumps({"type": "smart_open"})})
    with pytest.raises(ValueError, match="boolean"):
        ray.init(local_mode=True, _system_config={"automatic_object_spilling_enabled": "maybe"})
    assert not ray.is_initialized()


def test_spill_dirs_of_dead_sessions_are_removed(store_dir) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = os.path.join(store_dir, f"{SPILL_PREFIX}session-dead-x")
    os.makedirs(orphan)
    with open(os.path.join(orphan, OWNER_FILE), "w") as owner:
        owner.write(dead.stdout.strip())
    with open(os.path.join(orphan, "00ff"), "wb") as leftover:
        leftover.write(b"spilled bytes")
    ray.init(num_cpus=1, local_mode=True, object_store_memory=LIMIT, _system_config=_spill_config(store_dir))
    try:
        assert not os.path.exists(orphan)
    finally:
        ray.shutdown()
