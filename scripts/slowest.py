"""The slowest tests of `make test`'s phases together, from their JUnit XML reports.

    python scripts/slowest.py build/test-results/{quiet,serial,parallel}.xml

pytest's own --durations lists each phase alone; this lists the 15 slowest of all (a
test's time: its setup, call and teardown), each phase's wall time and count, and the files
whose tests used the most CPU (tests/conftest.py records each test's CPU time, its reaped
processes included): the parallel phase keeps every CPU busy, so these decide its length.
The tests that failed come last, each with the first line of its message: a CI log that keeps
only its tail still says what failed."""

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

SHOWN = 15
REASON_CHARS = 300


def main(reports: list[str]) -> None:
    tests, cpu, failed = [], {}, []
    for report in map(Path, reports):
        if not report.exists():
            print(f"{report}: no report (the phase did not run)")
            continue
        suite = ElementTree.parse(report).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        print(f"{report.stem}: {suite.get('tests')} tests, {float(suite.get('time')):.0f} s "
              f"({suite.get('failures')} failed, {suite.get('errors')} errors, {suite.get('skipped')} skipped)")
        tests += [(float(case.get("time") or 0), f"{case.get('classname')}::{case.get('name')}", report.stem)
                  for case in suite.iter("testcase")]
        for case in suite.iter("testcase"):
            for outcome in (*case.iter("failure"), *case.iter("error")):
                reason = (outcome.get("message") or outcome.text or "").strip().splitlines() or [""]
                failed.append((report.stem, f"{case.get('classname')}::{case.get('name')}", outcome.tag,
                               reason[0][:REASON_CHARS]))
            for prop in case.iter("property"):
                if prop.get("name") == "cpu_s":
                    key = (report.stem, case.get("classname"))
                    cpu[key] = cpu.get(key, 0.0) + float(prop.get("value"))
    print(f"\n{SHOWN} slowest tests (setup + call + teardown):")
    for seconds, name, phase in sorted(tests, reverse=True)[:SHOWN]:
        print(f"{seconds:8.1f} s  {phase:8}  {name}")
    if cpu:
        print(f"\n{SHOWN} files whose tests used the most CPU (their processes included):")
        for (phase, name), seconds in sorted(cpu.items(), key=lambda kv: -kv[1])[:SHOWN]:
            print(f"{seconds:8.1f} s  {phase:8}  {name}")
    if failed:
        print(f"\n{len(failed)} failed (pytest's report of each is above, in its phase):")
        for phase, name, tag, reason in failed:
            print(f"  {phase:8}  {name}  [{tag}]\n            {reason}")


if __name__ == "__main__":
    main(sys.argv[1:])
