"""The capstone: a server model of the student's own, `mine`.

Its source is csrc/servers/mine.c in the student's own copy of csrc/ (paths.own_sources():
their checkout, or HOME/csrc in a shared install), made once from the template
csrc/capstone/mine.c, whose header is the contract.  From then on it is a model like the
others: csrc/Makefile builds every servers/*.c, so build.models() lists it and every
experiment takes it in `models`.  The battery (labkit.battery) builds the text of the file
into a scratch tree, so a check judges exactly the text it was given (grading exports it).

Invariants: the student's file is never overwritten; csrc/ of a shared install is never
written (own_sources() makes the user's copy first).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import build, paths
from .errors import BuildError, LabError
from labkit.row import ok_rows

MODEL = build.MINE  # the one model the Makefile builds apart
TEMPLATE = Path("capstone") / "mine.c"   # under csrc/
SOURCE = Path("servers") / f"{MODEL}.c"  # under the user's csrc/


@dataclass(frozen=True)
class Design:
    key: str
    title: str
    idea: str
    closest: tuple[str, ...]  # the lab's models it is measured against
    expect: str               # where it should land, for the prediction


DESIGNS = {design.key: design for design in (
    Design("threads_epoll", "threads plus epoll",
           "one thread accepts and hands each connection to one of N threads, each running its own "
           "epoll loop over its own connections",
           ("epoll", "epoll_workers", "threaded"),
           "like epoll on one CPU; on several CPUs it scales as epoll_workers does, without processes"),
    Design("reuseport_workers", "SO_REUSEPORT epoll workers",
           "N processes, each with its own listening socket on the same port (SO_REUSEPORT) and its own "
           "epoll loop: the kernel spreads connections by a hash of their addresses",
           ("epoll_reuseport", "epoll_workers", "epoll"),
           "like epoll_reuseport: no shared accept queue, no herd; uneven when few connections hash unevenly"),
    Design("uring_multishot", "io_uring, multishot accept, provided buffers",
           "one ring: a multishot accept (Linux 5.19) keeps producing connections, and a multishot recv per "
           "connection (Linux 6.0) takes buffers from a ring the server provides (5.19), so no buffer waits in "
           "a recv on an idle connection",
           ("uring", "epoll"),
           "fewer system calls per request than epoll; memory per idle connection close to epoll's: the "
           "session's 16 KiB input buffer, the kernel's socket and io_uring's request state remain"),
    Design("bounded_pool", "a thread pool with a bounded queue and back-pressure",
           "N threads take connections from a queue of fixed size; when it is full the acceptor stops "
           "accepting, so the kernel's accept queue (the backlog) holds the rest",
           ("pool", "threaded", "prefork"),
           "like pool: at most N clients served at once, the rest wait in two queues you can measure"),
)}


def path() -> Path:
    """Where the student's server lives now (it may not exist yet: start() makes it)."""
    return paths.CSRC / SOURCE


def template() -> Path:
    """The template: the lab's csrc/capstone/mine.c (in a students' edition, the skeleton)."""
    found = paths.ROOT / "csrc" / TEMPLATE
    if not found.is_file():
        raise LabError(f"the capstone's template {found} is missing", "restore it: git checkout -- csrc/capstone/")
    return found


def start() -> Path:
    """The student's server file, made from the template the first time (never overwritten).
    Makes the user's own copy of csrc/ first in a shared install."""
    own = paths.own_sources() / SOURCE
    if not own.exists():
        own.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template(), own)
        print(f"your server: {own}")
        print(f"  made from the template {template()}")
    else:
        print(f"your server: {own}")
    print("open it in JupyterLab's file browser (csrc/servers/mine.c, beside notebooks/) or an editor;")
    print("after every edit, run my_server = capstone.source() again")
    return own


def source() -> str:
    """The text of the student's server as it is now."""
    found = path()
    if not found.is_file():
        raise LabError(f"you have no server yet ({found} does not exist)",
                       "run capstone.start() first: it makes the file from the template")
    return found.read_text(errors="replace")


def version(model: str | None) -> str | None:
    """For the student's own model, a digest of its source as it is now (the sweep keys its
    points with it: an edited server is measured again); None for the lab's models."""
    if model != MODEL or not path().is_file():
        return None
    import hashlib

    return hashlib.sha256(path().read_bytes()).hexdigest()[:16]


def show_designs() -> None:
    from IPython.display import Markdown, display

    rows = ["| key | design | the idea | measured beside | where it should land |", "|---|---|---|---|---|"]
    rows += [f"| `{d.key}` | {d.title} | {d.idea} | {', '.join(d.closest)} | {d.expect} |" for d in DESIGNS.values()]
    display(Markdown("\n".join(rows)))


def contract(text: str | None = None) -> str:
    """The header comment of the template (or of `text`): the contract."""
    text = template().read_text() if text is None else text
    start, end = text.find("/*"), text.find("*/")
    if start < 0 or end < start:
        raise LabError("the template has no header comment", "restore it: git checkout -- csrc/capstone/")
    return text[start:end + 2]


def show_template_contract() -> None:
    from IPython.display import Markdown, display

    display(Markdown(f"`csrc/{TEMPLATE}`, its header:\n```c\n{contract()}\n```"))


def check_design(design) -> None:
    """The chosen design is one of DESIGNS' keys."""
    assert design in DESIGNS, (f"my_design is {design!r}: choose one of {', '.join(map(repr, DESIGNS))} "
                               "(the table above)")


# ---------------------------------------------------------------------------
# building a text of the student's server


def build_text(text: str, sanitize: bool = False) -> Path:
    """`text` built as the model `mine` in a scratch copy of the lab's csrc/ (ASan + UBSan with
    `sanitize`); the binary's path.  The same text is built once (the copy is named after it,
    and parallel graders share it under a lock).  A compile error raises BuildError with
    gcc's own message."""
    from .scratch import scratch_build

    binary, failed = scratch_build(MODEL, MODEL, {SOURCE: text}, sanitize, parts=("obj", "san"))
    if failed is not None:
        raise BuildError(f"your server does not compile{' with ASan and UBSan' if sanitize else ''} "
                         "(gcc's message below)", failed,
                         "read the first error (mine.c:LINE: error: ...), fix that line in "
                         "csrc/servers/mine.c, run `my_server = capstone.source()` and the battery again")
    return binary


# ---------------------------------------------------------------------------
# where `mine` lands among the lab's models


def standing(df, metric: str, higher_is_better: bool = True, **where) -> str:
    """One sentence placing `mine` among the models of `df` for `metric`: the medians at the
    largest value of the sweep's first varying column (clients, rate, size ...) that mine was
    measured at, the others at the same value; `where` (column=value) narrows the rows first."""
    import pandas as pd

    from .plots import readable

    for column, value in where.items():
        df = df[df[column] == value] if df is not None and column in df else df
    if df is None or len(df) == 0 or "model" not in df:
        return "nothing was measured"
    ok = ok_rows(df)
    if metric not in ok or not (ok["model"] == MODEL).any():
        return f"mine has no successful measurement of {metric} here"
    ours = ok[ok["model"] == MODEL]
    axis = next((column for column in ("clients", "rate", "size", "body_bytes", "idle", "workers")
                 if column in ok and ours[column].nunique() > 0 and ok[column].nunique() > 1), None)
    where = ""
    if axis is not None:
        at = ours[axis].max()
        ok = ok[ok[axis] == at]
        where = f" at {axis} = {readable(at)}" if isinstance(at, (int, float)) else f" at {axis} = {at}"
    medians = ok.groupby("model")[metric].median().dropna()
    medians = medians.sort_values(ascending=not higher_is_better)
    if MODEL not in medians:
        return f"mine has no successful measurement of {metric}{where}"
    if pd.isna(medians[MODEL]):
        return f"mine has no value of {metric}{where}"
    intervals = {model: _interval(rows, metric) for model, rows in ok.groupby("model")}
    shown = "; ".join(f"{model} {readable(value)}{_range(intervals[model])}" for model, value in medians.items())
    better = "higher" if higher_is_better else "lower"
    runs = {model: (list(pd.to_numeric(rows[metric], errors="coerce").dropna()), _run_interval(rows, metric))
            for model, rows in ok.groupby("model")}
    return f"{metric}{where} ({better} is better): {shown}: {_place(medians, runs, higher_is_better)}"


def _run_interval(rows, metric: str):
    """The one run's own interval of `metric` (labkit.batches: valid for a queue), or None."""
    from .uncertainty import Interval, interval_columns

    columns = interval_columns(metric)
    if columns is None or len(rows) != 1 or not set(columns) <= set(rows.columns):
        return None
    low, high, level = (float(rows[column].iloc[0]) for column in columns)
    return Interval(low, high, level) if low == low and high == high and level == level else None


def _interval(rows, metric: str):
    """A model's interval at the point (labkit.uncertainty via plots.grid.point_interval: of
    its repeats' median, or its one run's own percentile), or None where it has none."""
    import pandas as pd

    from .plots.grid import point_interval
    from .uncertainty import Interval

    measured = pd.to_numeric(rows[metric], errors="coerce").dropna()
    low, high, _ = point_interval(rows, metric, measured)
    return Interval(low, high, math.nan) if low < high else None  # one run of a figure with none: low == high


def _range(interval) -> str:
    from .plots import readable

    return f" ({readable(interval.low)}-{readable(interval.high)})" if interval is not None else ""


def _place(medians, runs: dict, higher_is_better: bool) -> str:
    """'mine is 2nd of 3', or 'mine ties for 1st of 3 (with epoll: rank test on 8 and 8
    replications: p = 0.4)': two models differ only where uncertainty.compare says so (a
    rank test on their replications at 5%, or one run each, the runs' own 95% intervals);
    where it cannot tell, they tie, and the sentence says why."""
    from .uncertainty import compare

    mine = medians[MODEL]
    said = {model: compare(runs[MODEL][0], runs[model][0], runs[MODEL][1], runs[model][1])
            for model in medians.index if model != MODEL}
    ahead = sum(1 for model, value in medians.items()
                if model != MODEL and said[model].different and (value > mine) == higher_is_better)
    ties = [model for model in medians.index if model != MODEL and not said[model].different]
    if not ties:
        return f"mine is {_ordinal(ahead + 1)} of {len(medians)}"
    why = "; ".join(f"{model}: {said[model].how}" for model in ties)
    return f"mine ties for {_ordinal(ahead + 1)} of {len(medians)} (with {why})"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
