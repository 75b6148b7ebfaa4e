"""Where things live in the repository.  Every module asks here."""

import os
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
# pid files of processes labkit started (for orphan clean-up); LABKIT_RUN_DIR moves them
# (a user who may not write into build/, as in a shared checkout)
RUN_DIR = Path(os.environ.get("LABKIT_RUN_DIR") or BUILD / "run")
