"""`fray-ray run --address ... --token ...`: an unmodified Ray script reaches a cluster that wants
a token, given on the command line (nothing in the environment, nothing recorded)."""

from __future__ import annotations

import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers

from environments import unrelated_environment  # noqa: E402
from standalone_cluster import standalone_cluster  # noqa: E402

SCRIPT = textwrap.dedent(
    """
    import ray

    ray.init()

    @ray.remote
    def double(x):
        return 2 * x

    print("RESULT", ray.get(double.remote(21)))
    """
)


def _clean_env(records: Path) -> dict[str, str]:
    env = unrelated_environment()
    env["FRAY_RAY_TEMP_DIR"] = str(records)  # a private, empty record directory
    return env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    token = secrets.token_hex(16)
    records = tmp_path_factory.mktemp("records")
    with standalone_cluster(["--token", token, "--cpu", "1", "--memory", "2g"], _clean_env(records),
                            module="fray_ray.cluster") as (_, info):
        yield info


def _run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    records = tmp_path / "records"
    records.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "fray_ray", "run", *options, str(script)],
        cwd=tmp_path, env=_clean_env(records), capture_output=True, text=True, timeout=240,
    )


def test_run_reaches_a_cluster_with_the_token_given(cluster: dict, tmp_path: Path) -> None:
    result = _run(tmp_path, "--address", cluster["address"], "--token", cluster["token"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RESULT 42" in result.stdout


def test_run_without_the_token_is_refused_saying_so(cluster: dict, tmp_path: Path) -> None:
    result = _run(tmp_path, "--address", cluster["address"])
    assert result.returncode != 0
    assert "RESULT" not in result.stdout
    assert "token" in result.stderr.lower(), result.stderr[-3000:]
