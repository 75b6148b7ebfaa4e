"""docs/architecture.md's map of labkit, made from labkit/__init__.py's (the one written by hand):
`python3 scripts/architecture_map.py --write` puts it between the page's markers, and
tests/layout/test_layout.py fails when the page and the tree differ."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- labkit's map: made by scripts/architecture_map.py from labkit/__init__.py; do not edit here -->"
END = "<!-- end of labkit's map -->"


def entries() -> list[tuple[str, str, str]]:
    """(job, name, what) for each line of labkit/__init__.py's map, in order; a package's name
    ends with '/'."""
    text = ast.get_docstring(ast.parse((ROOT / "labkit" / "__init__.py").read_text())) or ""
    found, job, started = [], "", False
    for line in text.splitlines():
        if line.startswith("The map, by job"):
            started = True
            continue
        if not started or not line.strip() or line.startswith(("the glossary", "that page")):
            continue
        if line.startswith("  "):
            name, _, what = line.strip().partition(" ")
            found.append((job, name, what.strip()))
        elif not line.startswith(("the ", "that ")):
            job = line.strip()
    return found


def render() -> str:
    lines = [BEGIN, "```"]
    job = None
    for each_job, name, what in entries():
        if each_job != job:
            lines.append(f"{each_job}:")
            job = each_job
        shown = name if name.endswith("/") else f"{name}.py"
        lines.append(f"  {shown:<18} {what}")
    lines += ["```", END]
    return "\n".join(lines)


def written() -> str:
    page = PAGE.read_text()
    start, end = page.find(BEGIN), page.find(END)
    return page[start:end + len(END)] if 0 <= start < end else ""


if __name__ == "__main__":
    if "--write" not in sys.argv[1:]:
        print(render())
        sys.exit(0)
    page, old = PAGE.read_text(), written()
    if not old:
        sys.exit(f"{PAGE}: no markers; put {BEGIN!r} and {END!r} where the map goes")
    PAGE.write_text(page.replace(old, render()))
