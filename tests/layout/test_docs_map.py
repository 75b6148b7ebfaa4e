"""The documentation's map: README.md stays a page a newcomer reads in five minutes, every
relative link in README.md and docs/**/*.md leads to a file of the lab (and a #fragment to a
heading of that file), every page under docs/ is reachable from README.md by links, and every
file or module of the lab the pages name in code (`labkit/sweep.py`, `labkit.exercises.checks`)
is there, and every `labkit` command they show is one labkit takes.

docs/students/README.md is the template of the students' edition's README.md
(labkit/instructor/release/readme.py), so its links are written, and resolved here, from the
lab's root, where the edition puts it.  In an edition README.md is that page, and its link to
docs/README.md keeps every page reachable there too.  Links inside code (fenced or `inline`)
are text, not links."""

import contextlib
import io
import json
import re
import shlex
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]  # the lab: tests/layout/ is two below it
README = ROOT / "README.md"
MOST_README_LINES = 250
RENDERED_AT_ROOT = {ROOT / "docs" / "students" / "README.md"}

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_NAMED_PATH = re.compile(r"(?<![\w./-])((?:labkit|csrc|tests|scripts)/[\w./-]*[\w/])(?![\w*<])")
_NAMED_MODULE = re.compile(r"(?<![\w./-])labkit(?:\.\w+)+")
# Named in the pages, but not files of the lab's tree: made when the lab runs or a student
# hands in.
NOT_THE_LABS = {
    "csrc/servers/mine.c": "a student's capstone server, made from csrc/capstone/mine.c (git ignores it)",
    "csrc/exercises/": "where a student's C exercise files go in a hand-in",
    "tests/edition_left_out.json": "written into the students' edition by labkit release",
}


def pages() -> list[Path]:
    return [README] + sorted((ROOT / "docs").rglob("*.md"))


def prose(text: str) -> str:
    """The text without its code: fenced blocks and inline code spans."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def links(page: Path) -> list[str]:
    text = prose(page.read_text())
    return _LINK.findall(text) + _REFERENCE.findall(text)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered from -1."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def target(page: Path, link: str) -> tuple[Path, str] | None:
    """Where a relative link leads, and its fragment; None for a link off the lab (a URL)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", link, re.I):
        return None
    path, _, fragment = link.partition("#")
    base = ROOT if page in RENDERED_AT_ROOT else page.parent
    return (base / unquote(path)).resolve() if path else page, fragment


def test_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines < MOST_README_LINES, f"README.md has {lines} lines: move the detail into docs/ (docs/README.md)"


def test_every_link_resolves():
    broken, checked = [], 0
    for page in pages():
        for link in links(page):
            if (found := target(page, link)) is None:
                continue
            path, fragment = found
            checked += 1
            where = f"{page.relative_to(ROOT)}: ({link})"
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{where} leads to no file of the lab")
            elif fragment and (path.suffix != ".md" or fragment not in anchors(path)):
                broken.append(f"{where}: {path.name} has no heading #{fragment}")
    assert checked > 50, f"only {checked} relative links found: is the link pattern still right?"
    assert broken == []


def test_every_page_is_reachable_from_readme():
    reached, todo = {README}, [README]
    while todo:
        page = todo.pop()
        for link in links(page):
            found = target(page, link)
            if found and found[0].suffix == ".md" and found[0].is_file() and found[0] not in reached:
                reached.add(found[0])
                todo.append(found[0])
    orphans = [str(page.relative_to(ROOT)) for page in pages() if page not in reached]
    assert len(pages()) > 10
    assert orphans == [], f"no link from README.md leads to {orphans}: link them from docs/README.md"


def test_anchors_follow_githubs_rule(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# What lands in `grades/`\n## Several at once: `--jobs`\n## Notes\n## Notes\n"
                    "```sh\n# not a heading\n```\n")
    assert anchors(page) == {"what-lands-in-grades", "several-at-once---jobs", "notes", "notes-1"}


def named_in_code(page: Path) -> list[str]:
    """The lab's paths and labkit's modules a page names in code: inline, or in a block of
    shell, Python or C (a block of plain text may be a tree, whose names are relative)."""
    text = page.read_text()
    blocks = [m.group(0) for m in _FENCE.finditer(text) if re.match(r"(```|~~~)(sh|bash|python|c)\b", m.group(0))]
    code = "\n".join(blocks + _CODE_SPAN.findall(_FENCE.sub("", text)))
    return _NAMED_PATH.findall(code) + _NAMED_MODULE.findall(code)


def is_in_the_lab(name: str) -> bool:
    if "/" in name:
        return (ROOT / name).exists()
    parts = name.split(".")  # labkit.a.b.c: a module or package, perhaps then a name in it
    for cut in {len(parts), max(len(parts) - 1, 2)}:
        stem = ROOT.joinpath(*parts[:cut])
        if stem.with_suffix(".py").is_file() or (stem / "__init__.py").is_file():
            return True
    return False


def left_out_of_this_edition() -> set[str]:
    """In a students' edition, the instructor's files labkit release left out (its
    tests/edition_left_out.json, "removed"); none in the instructor's checkout."""
    listed = ROOT / "tests" / "edition_left_out.json"
    return set(json.loads(listed.read_text()).get("removed", {})) if listed.is_file() else set()


def test_every_file_and_module_named_is_there():
    named = {(str(page.relative_to(ROOT)), name) for page in pages() for name in named_in_code(page)}
    absent = NOT_THE_LABS.keys() | left_out_of_this_edition()
    missing = sorted((page, name) for page, name in named if name not in absent and not is_in_the_lab(name))
    assert len(named) > 50, f"only {len(named)} names found: is the pattern still right?"
    assert missing == [], "pages name what the lab does not have (renamed? moved?)"


def test_every_labkit_command_shown_is_one_labkit_takes():
    """A command in a shell block parses whole; one named inline names a command labkit has."""
    from labkit import cli

    parser = cli.parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    wrong, shown = [], 0
    for page in pages():
        text = page.read_text()
        shell = [m.group(0) for m in _FENCE.finditer(text) if re.match(r"(```|~~~)(sh|bash)\b", m.group(0))]
        for line in "\n".join(shell).replace("\\\n", " ").splitlines():
            for args in re.findall(r"(?<![\w.-])(?:\.venv/bin/)?labkit((?: +[^\s;&|'`#]+)+)", line.split("#")[0]):
                shown += 1
                try:
                    with contextlib.redirect_stderr(io.StringIO()):
                        parser.parse_args(shlex.split(args))
                except SystemExit:
                    wrong.append(f"{page.relative_to(ROOT)}: labkit{args}")
        for span in _CODE_SPAN.findall(_FENCE.sub("", text)):
            for command in re.findall(r"(?<![\w/.-])labkit +([a-z][\w-]*)", span):
                shown += 1
                if command not in commands:
                    wrong.append(f"{page.relative_to(ROOT)}: `{span}`")
    assert shown > 50, f"only {shown} commands found: is the pattern still right?"
    assert wrong == [], "commands labkit does not take"
