#!/usr/bin/env bash
# Run a command first in line for the CPUs: in a cgroup of its own whose CPU weight is the
# largest the kernel takes, so that whatever else runs on the machine gets only the CPU time
# the command leaves.  make test runs its serial phase (the tests that time what they
# measure, one at a time) this way beside the parallel phase, rather than before it.
#
# Why a cgroup and not `nice`: the scheduler shares a CPU between sibling groups by their
# weight first, and only then between the tasks inside a group by their nice values.  With
# autogroup on (kernel.sched_autogroup_enabled, the default of most distributions' kernels)
# every session is a group of its own at the same weight, and the tests' servers, kernels and
# browsers each start a session (setsid); the grading sandbox puts each graded run in a cgroup
# of its own at the root.  So a nice value holds none of them back.  A cgroup is inherited
# through fork and setsid: every process the command starts stays in it.  Its weight is
# cpu.shares 262144 (cgroup v1, MAX_SHARES; siblings have 1024) or cpu.weight 10000 (v2; siblings
# have 100): against one busy sibling it gets 99.6% or 99% of a CPU it wants.  What a weight
# cannot hold back is the kernel's own work for the others (softirqs, interrupts), which the
# serial tests must bear as on any shared machine.
#
#   first-in-line.sh --check      exit 0 where it can (root, a cpu controller), else say why
#   first-in-line.sh COMMAND...   run COMMAND so; its exit status is the command's
#
# The cgroup is named labkit-test-first-<pid> (scripts/first-run-state.sh removes a leftover
# one) and removed once the command ends.
set -uo pipefail

cpu_folder() {
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then  # v2: the cpu controller on for the root's children
    # (systemd turns it on; this script changes nothing on the machine but its own folder)
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
      { echo "the cgroup v2 cpu controller is not on in /sys/fs/cgroup/cgroup.subtree_control"; return 1; }
    echo /sys/fs/cgroup
  elif [[ -f /sys/fs/cgroup/cpu/cpu.shares ]]; then
    echo /sys/fs/cgroup/cpu
  else
    echo "no cgroup cpu controller mounted"; return 1
  fi
}

if (( EUID != 0 )); then
  echo "first in line: not root, so no cgroup of its own"
  exit 1
fi
root=$(cpu_folder) || { echo "first in line: $root"; exit 1; }
[[ ${1:-} == --check ]] && exit 0

group=$root/labkit-test-first-$$
mkdir "$group" || exit 1
if [[ -f $group/cpu.weight ]]; then echo 10000 >"$group/cpu.weight"; else echo 262144 >"$group/cpu.shares"; fi
bash -c 'echo $BASHPID >"$1/cgroup.procs" && shift && exec "$@"' first-in-line "$group" "$@"
status=$?
# Whatever the command left running goes, then the group (the tests check that nothing is left).
for _ in 1 2 3 4 5 6 7 8 9 10; do
  xargs -r kill -KILL <"$group/cgroup.procs" 2>/dev/null
  rmdir "$group" 2>/dev/null && break
  sleep 0.2
done
[[ -d $group ]] && echo "first in line: warning: could not remove $group" >&2
exit $status
