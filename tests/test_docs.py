"""The documents name only files that exist, link only into the repository, and their Python runs.

The rule for paths, in ARCHITECTURE.md, README.md, SECURITY.md and docs/*.md:

- Only inline code (text between single backticks) is read; fenced code blocks hold commands and
  diagrams, not references.
- A token is a path when it contains `/` or ends in `.py`, `.md` or `.toml`.
- A token with whitespace is a command: each of its words that contains `/` is read as a token
  (`python scripts/generate_protos.py`); its other words are arguments, not paths.
- Skipped as clearly not repository paths: URLs (`://`),
  absolute paths (`/proc`, Iris job names such as `/<user>/<job>`), paths relative to some other
  directory (`./a`, `../x`), and tokens holding placeholder or code characters
  (`< > * $ = { } ( ) [ ] , : ...`).
- A path with `/` is relative to the repository root and must exist there (a trailing `/` means
  a directory). A bare file name (no `/`) must be the name of a file somewhere in the repository,
  since prose often names a file of the directory it is about.

Links (`[text](target)`) of README.md and docs/*.md: a web address (`http://`, `https://`) is a
page, not a file; every other target, relative to its document's directory, must be a file or
directory inside the repository (its `#anchor` aside), never an absolute path, a `file:` URL or
a path that leaves the repository.

Every ```python block of README.md and docs/*.md runs as written, each on its own in a fresh
interpreter in an empty directory, with no cluster address in its environment. A block that
cannot run here (one that needs a real Iris cluster) follows a line
`<!-- docs-test: skip <reason> -->`, and the test reports it skipped with that reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = tuple(sorted(str(path.relative_to(REPO)) for path in (REPO / "docs").glob("*.md")))
#: docs/ray_options.md is written by scripts/options_table.py from the options table, naming
#: modules relative to fray_ray/ (`--check` keeps it current), so the path rule skips it.
DOCUMENTS = ("ARCHITECTURE.md", "README.md", "SECURITY.md", *(page for page in PAGES if page != "docs/ray_options.md"))
#: The documents whose links and Python blocks are checked: what a user reads.
USER_DOCUMENTS = ("README.md", *PAGES)
PATH_SUFFIXES = (".py", ".md", ".toml")
#: Characters that make a token a placeholder, a glob or code rather than a path.
NOT_PATH_CHARACTERS = set("<>*$={}()[],:")
#: Directories that hold no file a document could name (tool caches, virtualenvs).
UNLISTED_DIRECTORIES = {".git", ".venv", "venvs", "reports", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_WEB = re.compile(r"^https?://", re.IGNORECASE)


def candidate_paths(markdown: str) -> list[str]:
    """The inline-code tokens of `markdown` that name repository paths, by the module's rule."""
    prose = _FENCE.sub("", markdown)
    found = []
    tokens = []
    for code in _INLINE_CODE.findall(prose):
        words = code.split()
        tokens += words if len(words) == 1 else [w for w in words if "/" in w]
    for token in tokens:
        if not ("/" in token or token.endswith(PATH_SUFFIXES)):
            continue
        if "://" in token or "..." in token:
            continue
        if token.startswith(("/", "./", "../")) or NOT_PATH_CHARACTERS & set(token):
            continue
        found.append(token)
    return found


def _file_names() -> set[str]:
    names: set[str] = set()
    for _directory, subdirectories, files in os.walk(REPO):
        subdirectories[:] = [d for d in subdirectories if d not in UNLISTED_DIRECTORIES and not d.endswith(".egg-info")]
        names.update(files)
    return names


def missing_paths(markdown: str, root: Path, file_names: set[str]) -> list[str]:
    """The path tokens of `markdown` that do not exist under `root` (bare names: in `file_names`)."""
    missing = []
    for token in candidate_paths(markdown):
        if "/" not in token:
            if token not in file_names:
                missing.append(token)
            continue
        target = root / token
        exists = target.is_dir() if token.endswith("/") else target.exists()
        if not exists or not target.resolve().is_relative_to(root):
            missing.append(token)
    return missing


def links_outside(markdown: str, root: Path, directory: Path | None = None) -> list[str]:
    """The link targets of `markdown` (a document in `directory`, default `root`) that are
    neither web pages nor files inside `root`."""
    bad = []
    for target in _LINK.findall(markdown):
        if _WEB.match(target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not path or "://" in path or path.startswith(("/", "file:")):
            bad.append(target)
            continue
        resolved = ((directory or root) / path).resolve()
        if not resolved.is_relative_to(root) or not resolved.exists():
            bad.append(target)
    return bad


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_path_in_backticks_exists(document: str) -> None:
    text = (REPO / document).read_text(encoding="utf-8")
    if document in ("ARCHITECTURE.md", "SECURITY.md"):
        assert candidate_paths(text), f"{document} names no path at all: is the rule still reading it?"
    missing = missing_paths(text, REPO, _file_names())
    assert missing == [], f"{document} names paths that do not exist in the repository: {missing}"


@pytest.mark.parametrize("document", USER_DOCUMENTS)
def test_links_lead_only_into_the_repository(document: str) -> None:
    path = REPO / document
    text = path.read_text(encoding="utf-8")
    if document == "README.md":
        assert _LINK.findall(text), "README.md has no links: is the rule still reading it?"
    assert links_outside(text, REPO, path.parent) == []


_PYTHON_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s+(.*?)\s*-->\s*$")


def python_blocks(markdown: str) -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason or None) of each ```python block of `markdown`."""
    blocks = []
    for match in _PYTHON_BLOCK.finditer(markdown):
        line = markdown.count("\n", 0, match.start()) + 1
        before = markdown[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before)
        blocks.append((line, match.group(1), skip.group(1) if skip else None))
    return blocks


BLOCKS = [
    pytest.param(code, skip, id=f"{document}:{line}")
    for document in USER_DOCUMENTS
    for line, code, skip in python_blocks((REPO / document).read_text(encoding="utf-8"))
]
#: Variables that would point a block at some other cluster than the one it starts.
_CLUSTER_VARIABLES = ("FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_TOKEN", "FRAY_RAY_CLUSTER_CONFIG", "FRAY_RAY_LOCAL_MODE")


@pytest.mark.parametrize(("code", "skip"), BLOCKS)
def test_python_block_runs_as_written(code: str, skip: str | None, tmp_path: Path) -> None:
    if skip:
        pytest.skip(skip)
    env = {k: v for k, v in os.environ.items() if k not in _CLUSTER_VARIABLES}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, f"exit status {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"


def test_the_block_reader_finds_blocks_and_skip_reasons() -> None:
    text = "\n".join([
        "```python", "print(1)", "```",
        "<!-- docs-test: skip needs a real Iris cluster -->", "```python", "import x", "```",
        "```bash", "echo no", "```",
    ])
    assert python_blocks(text) == [(1, "print(1)\n", None), (5, "import x\n", "needs a real Iris cluster")]
    assert BLOCKS, "no Python block found in README.md or docs/: is the reader still reading them?"


def test_the_rule_reads_paths_and_skips_what_is_not_one(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("")
    (tmp_path / "NOTES.md").write_text("")
    text = "\n".join([
        "See `pkg/mod.py`, `pkg/`, `pkg/gone.py`, `NOTES.md`, `mod.py` and `nowhere.toml`;",
        "run `python pkg/mod.py --in a/b.txt script.py` and `python gone/x.py`.",
        "Not paths: `fray-ray run script.py`, `iris://host:port`, `/proc/<pid>/environ`, `./a`,",
        "`runtime_env={\"pip\": [\"x\"]}`, `/<user>/session-<id>`, `a/*.ckpt`, `fray_ray.iris`.",
        "```",
        "`fenced/gone.py`",
        "```",
        "[ok](NOTES.md#part) [web](https://example.org/x) [up](../elsewhere.md) [abs](/etc/passwd)",
        "[missing](pkg/nothing.md) [here](#section) [file](file:///etc/hosts)",
    ])
    assert candidate_paths(text) == [
        "pkg/mod.py", "pkg/", "pkg/gone.py", "NOTES.md", "mod.py", "nowhere.toml", "pkg/mod.py", "a/b.txt", "gone/x.py",
    ]
    assert missing_paths(text, tmp_path, {"mod.py", "NOTES.md"}) == ["pkg/gone.py", "nowhere.toml", "a/b.txt", "gone/x.py"]
    assert links_outside(text, tmp_path) == ["../elsewhere.md", "/etc/passwd", "pkg/nothing.md", "file:///etc/hosts"]
