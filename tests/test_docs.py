"""The top-level documents name only files that exist, and README.md links only into the repository.

The rule for paths, in ARCHITECTURE.md, README.md and SECURITY.md:

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

README.md's links (`[text](target)`): a web address (`http://`, `https://`) is a page, not a
file; every other target must be a file or directory inside the repository (its `#anchor`
aside), never an absolute path, a `file:` URL or a path that leaves the repository.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = ("ARCHITECTURE.md", "README.md", "SECURITY.md")
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


def links_outside(markdown: str, root: Path) -> list[str]:
    """The link targets of `markdown` that are neither web pages nor files inside `root`."""
    bad = []
    for target in _LINK.findall(markdown):
        if _WEB.match(target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not path or "://" in path or path.startswith(("/", "file:")):
            bad.append(target)
            continue
        resolved = (root / path).resolve()
        if not resolved.is_relative_to(root) or not resolved.exists():
            bad.append(target)
    return bad


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_path_in_backticks_exists(document: str) -> None:
    text = (REPO / document).read_text(encoding="utf-8")
    assert candidate_paths(text), f"{document} names no path at all: is the rule still reading it?"
    missing = missing_paths(text, REPO, _file_names())
    assert missing == [], f"{document} names paths that do not exist in the repository: {missing}"


def test_readme_links_only_into_the_repository() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert _LINK.findall(text), "README.md has no links: is the rule still reading it?"
    assert links_outside(text, REPO) == []


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
