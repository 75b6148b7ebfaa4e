#!/usr/bin/env bash
# make lock: write requirements.txt, the lock -- the exact version of every package the lab
# installs (transitive ones included), the newest that pyproject.toml's ranges admit today.
# make setup installs exactly these; run make lock, then make test, to move the lab forward.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q --disable-pip-version-check ".[grading,test]"
# what scripts/lock-leaves-out.txt says to leave out, and why
left_out=$(grep -v -E '^\s*(#|$)' scripts/lock-leaves-out.txt | awk '{print $1}')
"$scratch/venv/bin/pip" uninstall -q -y $left_out
{
  echo "# The lock: every package make setup installs, pinned exactly (transitive ones too)."
  echo "# Written by make lock (scripts/lock.sh) from pyproject.toml's ranges; do not edit by hand."
  echo "# labkit itself is installed on top of it (pip install --no-deps -e .)."
  "$scratch/venv/bin/pip" freeze --all --exclude-editable --disable-pip-version-check \
    | grep -v -i -E '^(pip|labkit)=='
} > requirements.txt
echo "requirements.txt: $(grep -c '==' requirements.txt) packages"
