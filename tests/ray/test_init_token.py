"""init(address, token=...): the bearer token of a running cluster's controller.

A standalone cluster runs in its own process with a token the test chose; each driver is a real
script run by this venv's python, with no token or address in its environment unless the test
puts one there.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import fray_ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from environments import unrelated_environment  # noqa: E402
from standalone_cluster import standalone_cluster  # noqa: E402

DEADLINE_S = 120.0

DRIVER = """
    import sys
    import fray_ray as ray

    kwargs = {} if sys.argv[2] == "-" else {"token": sys.argv[2]}
    try:
        ray.init(address=sys.argv[1], **kwargs)
    except Exception as exc:
        print("RAISED", type(exc).__name__, exc)
        sys.exit(3)

    @ray.remote
    def double(x):
        return 2 * x

    print("RESULT", ray.get(double.remote(21)))
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict]:
    """A standalone cluster requiring a token of the test's choosing: {address, token, ...}."""
    token = secrets.token_hex(16)
    with standalone_cluster(["--token", token, "--cpu", "1", "--memory", "2g"], _clean_env(),
                            module="fray_ray.cluster") as (_, info):
        assert info["token"] == token
        yield info


def _clean_env(**extra: str) -> dict[str, str]:
    env = unrelated_environment()
    env.update(extra)
    return env


def drive(tmp_path: Path, address: str, token: str | None, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    # A private, empty record directory: no token `fray-ray start` recorded elsewhere is found.
    records = tmp_path / "records"
    records.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(
        [sys.executable, str(script), address, "-" if token is None else token],
        cwd=tmp_path, env=_clean_env(FRAY_RAY_TEMP_DIR=str(records), **env),
        capture_output=True, text=True, timeout=DEADLINE_S,
    )


def test_token_given_to_init_connects(cluster: dict, tmp_path: Path) -> None:
    finished = drive(tmp_path, cluster["address"], cluster["token"])
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "RESULT 42" in finished.stdout


def test_missing_token_says_how_to_give_one(cluster: dict, tmp_path: Path) -> None:
    finished = drive(tmp_path, cluster["address"], None)
    assert finished.returncode == 3, finished.stdout + finished.stderr
    assert "RAISED ConnectionError" in finished.stdout
    assert "no token was given" in finished.stdout
    assert "fray_ray.init(address, token=...)" in finished.stdout
    assert "FRAY_RAY_TOKEN" in finished.stdout


def test_wrong_token_says_it_was_refused(cluster: dict, tmp_path: Path) -> None:
    finished = drive(tmp_path, cluster["address"], "not-the-token")
    assert finished.returncode == 3, finished.stdout + finished.stderr
    assert "RAISED ConnectionError" in finished.stdout
    assert "the token given was refused" in finished.stdout
    assert "not-the-token" not in finished.stdout  # the message never echoes a secret


def test_what_the_message_suggests_works(cluster: dict, tmp_path: Path) -> None:
    """Both remedies the error names: init(token=...) (above) and FRAY_RAY_TOKEN."""
    finished = drive(tmp_path, cluster["address"], None, FRAY_RAY_TOKEN=cluster["token"])
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "RESULT 42" in finished.stdout


def test_token_given_to_init_wins_over_the_environment(cluster: dict, tmp_path: Path) -> None:
    finished = drive(tmp_path, cluster["address"], cluster["token"], FRAY_RAY_TOKEN="stale-token")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "RESULT 42" in finished.stdout


# ---- a token where no controller wants one: refused before anything starts --------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"token": "t"}, ValueError, "starts an embedded cluster"),
        ({"address": "local", "token": "t"}, ValueError, "starts an embedded cluster"),
        ({"local_mode": True, "token": "t"}, ValueError, "local_mode"),
        ({"address": "127.0.0.1:1", "token": 123}, TypeError, "token must be a string"),
        ({"address": "127.0.0.1:1", "token": "  "}, ValueError, "must not be empty"),
    ],
)
def test_misplaced_token_is_refused_at_the_call(kwargs: dict, error: type, words: str,
                                                monkeypatch: pytest.MonkeyPatch, fresh_shutdown: None) -> None:
    for name in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS", "FRAY_RAY_LOCAL_MODE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(error, match=words):
        fray_ray.init(**kwargs)
    assert not fray_ray.is_initialized()


def test_a_refused_token_uncaught_shows_one_message_at_the_call(cluster: dict, tmp_path: Path) -> None:
    script = tmp_path / "uncaught.py"
    script.write_text(f"import fray_ray as ray\n\nray.init(address={cluster['address']!r}, token='not-the-token')\n")
    records = tmp_path / "records"
    records.mkdir(mode=0o700, exist_ok=True)
    finished = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                              env=_clean_env(FRAY_RAY_TEMP_DIR=str(records)), timeout=DEADLINE_S)
    assert finished.returncode == 1
    lines = finished.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[1].endswith('uncaught.py", line 3, in <module>'), \
        finished.stderr
    assert "the token given was refused" in finished.stderr
    assert finished.stderr.count("Traceback") == 1 and "connectrpc" not in finished.stderr, finished.stderr
    assert len(lines) <= 6, finished.stderr
