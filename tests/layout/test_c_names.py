"""The C's names, checked: every external symbol of the load generator's objects (as `nm`
lists them) begins with its room's prefix, as loadgen.h's table states it; every enum
constant in csrc/loadgen begins with its enum tag's first word in capitals; and no two
objects of csrc define the same external symbol, but the few listed here with the reason."""

import re
import subprocess
from pathlib import Path

import pytest

import serverproc

CSRC = serverproc.ROOT / "csrc"
LOADGEN = CSRC / "loadgen"
OBJ = serverproc.BUILD / "obj"
# The one word per idea across csrc/: a symbol defined twice is allowed only here.
BACKENDS = {path.stem for path in (CSRC / "loop").glob("ev_*.c")}
STAND_INS = {  # tests/session_drive.c links services/ without common/server_main.c
    "server_descriptors_enter": {"common/server_main", "tests/session_drive"},
    "server_descriptors_leave": {"common/server_main", "tests/session_drive"},
}


@pytest.fixture(scope="module")
def objects() -> dict[str, set[str]]:
    """'room/file' -> the external symbols its object defines, for every csrc source built."""
    serverproc.bin_dir(False, "lab")  # the objects of the current source
    found = {}
    for source in sorted(CSRC.glob("*/*.c")):
        obj = OBJ / source.parent.name / f"{source.stem}.o"
        if not obj.exists():
            assert source.parent != LOADGEN, f"{obj} was not built from {source}"
            continue  # a program this machine does not build (uring without liburing)
        listed = subprocess.run(["nm", "-g", "--defined-only", "--format=posix", str(obj)],
                                capture_output=True, text=True, check=True).stdout
        found[f"{source.parent.name}/{source.stem}"] = {line.split()[0] for line in listed.splitlines()}
    return found


def rooms() -> dict[str, tuple[str, ...]]:
    """loadgen.h's table: source file -> the prefixes its external names may begin with."""
    header = (LOADGEN / "loadgen.h").read_text()
    table = header[header.index(" *   prefix "):header.index("*/")].splitlines()[1:]
    prefixes = {}
    for line in table:
        row = re.match(r"\s*\*\s+(\(main only\)|[a-z_]+_(?:, [a-z_]+_)*)\s{2,}(\S.*)$", line)
        if row is None:
            continue
        allowed = () if row.group(1) == "(main only)" else tuple(row.group(1).split(", "))
        for name in row.group(2).split(", "):
            prefixes[name] = allowed
    return prefixes


def test_every_loadgen_file_has_a_room_in_the_table():
    sources = {path.name for path in LOADGEN.glob("*.c")}
    assert sources == set(rooms()), "add the file to loadgen.h's table of prefixes (or remove its row)"


def test_every_external_symbol_of_the_load_generator_begins_with_its_rooms_prefix(objects):
    wrong = []
    for source, allowed in rooms().items():
        for symbol in sorted(objects[f"loadgen/{Path(source).stem}"] - {"main"}):
            if not symbol.startswith(allowed):
                wrong.append(f"{source}: {symbol} (expected {' or '.join(allowed) or 'main only'})")
    assert wrong == []


def enums(text: str) -> list[tuple[str | None, list[str]]]:
    """Each enum declared in C text: (its tag, None if it has none; its constants)."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    found = []
    for tag, body in re.findall(r"\benum\s+(\w+)?\s*\{([^}]*)\}", text):
        names = [item.split("=")[0].strip() for item in body.split(",")]
        found.append((tag or None, [name for name in names if name]))
    return found


def test_the_enum_reader_sees_tags_constants_and_anonymous_enums():
    text = "enum kind { KIND_A = -1, /* a, b */ KIND_B };\nenum { LOOSE };\nenum kind k;"
    assert enums(text) == [("kind", ["KIND_A", "KIND_B"]), (None, ["LOOSE"])]


def test_every_enum_constant_begins_with_its_tags_first_word():
    wrong, seen = [], 0
    for path in sorted([*LOADGEN.glob("*.h"), *LOADGEN.glob("*.c")]):
        for tag, constants in enums(path.read_text()):
            seen += len(constants)
            prefix = f"{tag.split('_')[0].upper()}_" if tag else None
            wrong += [f"{path.name}: enum {tag or '(no tag)'} {name}" for name in constants
                      if prefix is None or not name.startswith(prefix)]
    assert seen > 30, "the enums of csrc/loadgen were not found"
    assert wrong == []


def test_no_two_objects_define_the_same_external_symbol(objects):
    definers: dict[str, set[str]] = {}
    for obj, symbols in objects.items():
        for symbol in symbols:
            definers.setdefault(symbol, set()).add(obj)
    assert len(definers["main"]) > 10, "every program's main: the objects were not all listed"
    twice = {}
    for symbol, where in definers.items():
        if len(where) < 2 or symbol == "main":  # main: each program has its own
            continue
        if {obj.split("/")[-1] for obj in where} <= BACKENDS and all(o.startswith("loop/") for o in where):
            continue  # loop/ev.h's contract: each readiness backend implements it, a program links one
        if where == STAND_INS.get(symbol):
            continue
        twice[symbol] = sorted(where)
    assert twice == {}
