"""The capstone's two student servers whose answers are known, for the tests that judge them:
the template's reference solution (threads plus epoll, written as a student would), the
same with a classic bug (flush_output() reporting everything it offered to write() as
written: tests/data/capstone/no_partial_write.c), and the skeleton a student starts from."""

from pathlib import Path

from labkit import capstone, paths
from labkit.csource import replace_function
from labkit.instructor import release

DATA = Path(__file__).parent / "data" / "capstone"
TEMPLATE = paths.ROOT / "csrc" / capstone.TEMPLATE


def reference() -> str:
    return TEMPLATE.read_text()


def with_bug() -> str:
    """The reference with the classic partial-write bug in flush_output()."""
    return replace_function(reference(), "flush_output", (DATA / "no_partial_write.c").read_text(),
                            "no_partial_write.c", TEMPLATE)


def skeleton() -> str:
    return release.strip_solutions(reference(), "csrc/capstone/mine.c")[0]
