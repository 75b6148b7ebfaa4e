"""tests/quickrun.py's shared runs: a run made first in line (make test's serial phase,
before the parallel phase starts) is waited for by every other reader, never made twice,
and a failed one fails each reader with its message.  The notebook run itself is replaced
by a stand-in that waits for the test's word: what is tested is who makes it and who waits."""

import threading
from pathlib import Path

import nbformat
import pytest

import quickrun
import waits

NAME = "00_setup.ipynb"


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """quickrun's shared folder of its own, and _run replaced: each call is recorded, waits
    until `go` is set, then writes a run (or raises `fails`, where the test set it)."""
    monkeypatch.setenv(quickrun.RUN_ENV, f"test{tmp_path.name}")
    made, go, fails = [], threading.Event(), []

    def run(name, source, folder):
        made.append((name, threading.current_thread().name))
        assert go.wait(30), "the test never said go"
        if fails:
            raise AssertionError(fails[0])
        (folder / "run").mkdir(parents=True)
        nbformat.write(nbformat.v4.new_notebook(), folder / "run" / "out.ipynb")
        (folder / "elapsed_s").write_text("1.5")

    monkeypatch.setattr(quickrun, "_run", run)
    yield made, go, fails
    quickrun.remove_shared_folder()


def _first_in_line(tmp_path, outcome: list) -> tuple[threading.Thread, Path]:
    """make_first_in_line for NAME on a thread of its own; its `ready` file once written."""
    ready = tmp_path / "ready"
    claimant = threading.Thread(target=lambda: outcome.append(quickrun.make_first_in_line(ready, (NAME,))),
                                name="first-in-line")
    claimant.start()
    return claimant, ready


def test_a_reader_waits_for_the_run_made_first_in_line_and_reads_it(stand_in, tmp_path):
    made, go, _ = stand_in
    failed, read = [], []
    claimant, ready = _first_in_line(tmp_path, failed)
    assert waits.wait_until(ready.exists, within=10), "make_first_in_line never said it held the lock"
    reader = threading.Thread(target=lambda: read.append(quickrun.run_quick(NAME)), name="reader")
    reader.start()  # asks while the run is being made: it must wait, not make its own
    assert waits.wait_until(lambda: made, within=10) == [(NAME, "first-in-line")]
    go.set()
    claimant.join(30)
    reader.join(30)
    assert failed == [0] and made == [(NAME, "first-in-line")]  # made once, by the claimant
    assert read and read[0].elapsed == 1.5


def test_failed_first_run_fails_readers(stand_in, tmp_path):
    """A failed run made first in line fails its readers with its message."""
    made, go, fails = stand_in
    fails.append("the kernel died in cell 3")
    go.set()
    failed = []
    claimant, _ = _first_in_line(tmp_path, failed)
    claimant.join(30)
    assert failed == [1]
    with pytest.raises(pytest.fail.Exception, match="the kernel died in cell 3"):
        quickrun.run_quick(NAME)
    assert len(made) == 1  # not made again by the reader
