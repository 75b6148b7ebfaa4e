#!/bin/sh
# The lab's round trip against sockperf's, one connection, 64-byte ping-pong,
# server and client pinned to disjoint CPUs, interleaved rounds.
# Extra arguments go to `labkit bench rtt` (e.g. --rounds 5 --engine threads).
set -e
cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=python3
exec "$PYTHON" -m labkit bench rtt "$@"
