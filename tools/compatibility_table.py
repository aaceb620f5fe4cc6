"""Rewrite the README's compatibility table (between its two marker comments) from the code:
`.venv/bin/python tools/compatibility_table.py [README.md]`."""

from __future__ import annotations

import sys
from pathlib import Path

from onceflow.protocol.compatibility import render_table, replace_table


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else Path(__file__).resolve().parent.parent / "README.md")
    old = path.read_text(encoding="utf-8")
    new = replace_table(old, render_table())
    if new != old:
        path.write_text(new, encoding="utf-8")
    print(f"{path}: compatibility table {'updated' if new != old else 'already up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
