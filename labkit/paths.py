"""Where things live in the repository.  Every module asks here."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
BUILD = ROOT / "build"
BIN = BUILD / "bin"            # the normal build: one executable per model, plus loadgen
SAN_BIN = BUILD / "san" / "bin"  # the same programs built with ASan + UBSan
CFFI_DIR = BUILD / "cffi"      # in-process modules compiled by cffi
DATA = ROOT / "data"
SEEDS = DATA / "seeds"         # the seed reports' tables, as CSV
RESULTS = DATA / "results"     # sweep results, appended as they are measured
NOTEBOOKS = ROOT / "notebooks"
RUN_DIR = BUILD / "run"        # pid files of processes labkit started (for orphan clean-up)
