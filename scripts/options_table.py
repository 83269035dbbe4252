"""Write docs/ray_options.md: every Ray option fray_ray takes, its default and where it is honoured.

The page is rendered from the options table (`fray_ray/_private/options/table.py`), so it says
what the code does; `tests/ray/test_options_table.py` fails when the committed page is stale.

    python scripts/options_table.py          # rewrite docs/ray_options.md
    python scripts/options_table.py --check  # exit 1 if docs/ray_options.md is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fray_ray._private.options.rendering import markdown

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "ray_options.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page is stale")
    args = parser.parse_args(argv)
    page = markdown()
    if args.check:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python scripts/options_table.py", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
