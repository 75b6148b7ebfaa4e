"""The capstone's two student servers whose answers are known, for the tests that judge them:
the template's reference solution (threads plus epoll, written as a student would), the
same with a classic bug (flush_output() reporting everything it offered to write() as
written: tests/data/capstone/no_partial_write.c), and the skeleton a student starts from."""

from pathlib import Path

from labkit import capstone, paths
from labkit.csource import replace_function
from labkit.instructor.release import edition as release

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


def _planted(anchor: str, bug: str) -> str:
    text = reference()
    assert text.count(anchor) == 1, f"the reference no longer has {anchor!r}: plant the bug elsewhere"
    return text.replace(anchor, bug)


# The reference with one bug each that answers every request right and takes a server down
# anyway (the battery's resource cases, labkit/battery/resources.py): name -> the text.
RESOURCE_BUGS = {
    # a connected socket is writable almost always: a level-triggered loop that always asks wakes for ever
    "always watches EPOLLOUT": lambda: _planted(
        "(session_out_pending(c->session) > 0 ? EPOLLOUT : 0)", "EPOLLOUT"),
    "always watches EPOLLIN": lambda: _planted("(room > 0 ? EPOLLIN : 0)", "EPOLLIN"),
    "polls with a zero timeout": lambda: _planted(
        "epoll_wait(w->epfd, events, MAX_EVENTS, -1)", "epoll_wait(w->epfd, events, MAX_EVENTS, 0)"),
    # a descriptor opened for each connection (an epoll instance of its own) and never closed
    "keeps a descriptor per connection": lambda: _planted(
        "*c = (struct conn){ .fd = fd, .session = s, .events = EPOLLIN };",
        "*c = (struct conn){ .fd = fd, .session = s, .events = EPOLLIN };\n"
        "        (void)epoll_create1(EPOLL_CLOEXEC); /* the bug: never closed */"),
    "keeps each session": lambda: _planted("    session_free(c->session);\n    free(c);\n", "    free(c);\n"),
    # ... or only the session of a connection that was reset: one path of the seven kinds of close
    "keeps the session of a reset connection": lambda: _planted(
        "    if (ready & (EPOLLERR | EPOLLHUP)) {\n        close_conn(w, c);",
        "    if (ready & (EPOLLERR | EPOLLHUP)) {\n        epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);\n"
        "        close(c->fd); /* the bug: its session is never freed */\n        free(c);"),
    # each worker remembers the last connection it closed, and touches it at the next close
    "uses a closed connection at the next close": lambda: _planted(
        "static void close_conn(struct worker *w, struct conn *c)\n{\n",
        "static __thread struct conn *closed_before; /* the bug: kept after free() */\n\n"
        "static void close_conn(struct worker *w, struct conn *c)\n{\n    struct conn *gone = closed_before;\n"
        "    closed_before = c;\n    if (gone != NULL)\n"
        "        gone->events = 0; /* a use after free, from this worker's second close on */\n"),
}


def still_watched() -> str:
    """The reference closing a connection without taking it out of its worker's epoll set
    first, as an older template did: correct until another process holds the
    socket as it closes (epoll(7): close() then leaves it in the set), and then the next
    epoll_wait hands the worker the connection it freed."""
    return _planted("    if (w != NULL)\n        epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);\n",
                    "    (void)w; /* the bug: the socket stays in the set when another reference to it lives on */\n")
