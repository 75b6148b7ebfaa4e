"""labkit: the Python side of the concurrent-servers lab.

Notebooks stay thin; the logic lives here, where it is tested.  This module
imports nothing heavy, so `python3 -m labkit build` works before the lab's
virtual environment exists.

The map, by job: every module and package of labkit's top level, once (the words are
the glossary's, docs/architecture.md; tests/layout/test_layout.py keeps this map, the tree and
that page in step, and the graph of rooms free of cycles).

Where things are
  paths            where things live: the lab as installed, one user's state (LABKIT_HOME)
  errors           LabError: what happened and what to do
  friendly         a LabError or a Note as a student reads it in a notebook
  store            results on disk: JSON Lines, appended and fsync'd, read back
  spreadsheet      a CSV cell a spreadsheet reads as data, never as a formula
The C programs
  makefile         csrc/Makefile run: the one C build recipe
  build            the servers, the load generator and the delay line, built
  procstat         the servers' /proc parser called in-process (cffi)
  csource          C sources shown, compared function by function, replaced
  scratch          a program built with someone's C in place of the lab's, and run
  stubs/           the C exercises as a tree holds them: which edition, what waits for one
Running them
  launcher         the one place processes start: pinned, own session, death signal, pid file
  procs/           a server or the load generator: spec -> argv, pinning, limits, run
  perf/            perf stat and perf record: what this machine counts, attached, parsed
  netlink/         "different hosts": two network namespaces joined by a shaped link
  busy_machine     whether a late process was held back by the machine or by itself
  orphans          lab processes a crash left behind, found and stopped
The machine
  system           machine facts: the CPUs, the open-file limit, the kernel
  confinement      what a container or cgroup allows: capabilities, seccomp, CPU quota
  syscall_probe    whether the system calls the lab needs get through, each tried once
  cpu_leases       the CPUs a sweep pins to, leased across every lab run on the machine
  cpu_limit        a student's function's CPU-time limit (RLIMIT_CPU) and its wall-clock backstop
  cpu_sharing      whether the server's CPUs were its own while the client ran
  kernel_view      what the kernel shows of a point while it runs: accept queue, memory
  doctor           what this machine can build and measure: its findings, each with its fix
One point
  row              the results row: every column once, a row's status
  measure          one point: the server and the client under perf -> one row
  server_counters  the counters a server prints as it stops
  failures         seed 002's failure cases, each provoked on purpose
A sweep
  params/          parameter kinds: each one's check, widget and read-back
  experiments/     the experiments, each a declaration file
  plan             an experiment with its values chosen and checked
  sweep            a plan's points measured in rounds and stored as they are measured
  sweep_time       how long a sweep will take here, said before it starts
  repeat_until     a point repeated until its median is known to a target
How sure a number is
  uncertainty      intervals of a quantile or a median, and whether two results differ
  batches          one run's own intervals from its consecutive batches (a queue's samples)
  verdicts         a row's self-checks: did the point measure what it meant to
  queue_theory     what a single-server queue's mean and p99 are (M/M/1, M/D/1, Lindley)
  schedule         the load generator's open-loop schedule, computed here from its recipe
  spin_draws       the spin service's service times as the load generator draws them
  calibration      the queue replayed on a run's own arrivals and draws, beside the run
  ground_truth     the spin service measured beside queueing theory
  what_breaks      latency against offered load: each model's knee, Little's law, SYN retries
Showing it
  plots/           the lab's figures and tables of results, each with its text alternative
  flame            where the time goes: folded stacks as flame charts
  panel            the control panel of any experiment
  recap            a notebook's closing table, "What you measured"
  seeds/           the seed reports' tables, and yours beside them
  figure_lint      what a figure would mislead a reader with, found before anyone looks
  publish/         figures and tables for slides and reports (`labkit export`)
  execute          a notebook executed to its end by papermill, its kernel on Unix sockets
The student's work
  exercises/       what a notebook imports to check itself: checks, predictions, C exercises
  facts            what a student's run saw of its machine, carried to the grader
  capstone         the capstone: a server model of the student's own, `mine`
  battery/         what a server must survive before its numbers mean anything
Against anchors
  bench/           the lab measured against tools it did not write and results known in advance
Commands
  cli              `labkit ...`: a thin command for each job
  __main__         `python -m labkit ...`
  instructor/      the instructor's rooms: release, grading, sandbox, cluster, lms, autograder
Old names
  queueing         labkit.what_breaks, for notebooks handed out before it was renamed
"""

__version__ = "0.1.0"
