#!/usr/bin/env bash
# Put this machine back in the state a freshly booted one is in, as far as the lab and perf
# ever changed it, and say what was undone.  .ci/run calls it (as root) before the tests, so
# a development machine fails where a fresh one would rather than hiding it: a tracefs that
# perf mounted once made the syscall counts work for ever after, and a fresh machine has none.
#
# What the lab (and the tools it runs) may leave on a machine, each undone here:
#   tracefs, debugfs      perf mounts tracefs (and older perfs debugfs) the first time it is
#                         asked for a tracepoint as root; a booted machine has neither mounted
#   network namespaces    lk<id>[smc] (labkit.netlink), and the /run/netns mount `ip netns add`
#                         makes; a kill -9 of a Link's owner and its reaper leaves them
#   cgroups               labkit-grade-* (labkit.instructor.sandbox.isolation), one per graded run,
#                         labkit-test-* (tests/machine/test_confinement.py), and labkit-test-first-*
#                         (scripts/first-in-line.sh, make test's serial phase)
#   users                 labkit-hub-* (tests/local_hub.py), when a hub test was killed
#   files in /tmp         labkit-* lock, run and scratch folders
# What the lab does not change on the host, so nothing to undo: sysctls (the links set
# theirs inside their own namespaces), kernel modules (veth and sch_tbf are loaded by the
# kernel on first use, and unloading them would not make a machine any fresher: a booted
# one loads them the same way).  Nor is the one controller the lab may turn on: on cgroup v2
# the grading sandbox (isolation.py) turns the cpu controller on for the root's children
# where it is off (systemd usually has it on), and whether a fresh machine had it on is not
# known here; tests/machine/test_confinement.py switches it off again if it switched it on, and
# scripts/first-in-line.sh only uses it where it is on.
#
# It kills every lab process it finds (servers, perf, graded runs): CI calls it on a machine
# whose session has ended, so nothing of the lab's should still run there.  Without root it
# says so and changes nothing.
set -uo pipefail

undone=()
say() { undone+=("$1"); echo "  undone: $1"; }

if (( EUID != 0 )); then
  echo "first-run state: not root, so nothing is undone (tracefs, namespaces and cgroups need root)"
  exit 0
fi

# Lab processes first: a server or perf still running holds a namespace or a mount.
for pattern in '/build/bin/' 'labkit-sandbox' 'ip netns exec lk'; do
  if pkill -KILL -f -- "$pattern" 2>/dev/null; then say "killed leftover processes matching '$pattern'"; fi
done

# Namespaces, then the /run/netns mount once nothing is left in it.
if command -v ip >/dev/null; then
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^lk[0-9a-f]{6}[smc]$'); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null && say "deleted network namespace $ns"
  done
  if mountpoint -q /run/netns && [[ -z $(ls -A /run/netns 2>/dev/null) ]]; then
    umount /run/netns 2>/dev/null && rmdir /run/netns 2>/dev/null && say "unmounted the empty /run/netns"
  fi
fi

# Graded runs' cgroups (v2 and v1): their processes killed, then the folders removed.
for folder in /sys/fs/cgroup/labkit-{grade,test}-* /sys/fs/cgroup/*/labkit-{grade,test}-*; do
  [[ -d $folder ]] || continue
  xargs -r kill -KILL <"$folder/cgroup.procs" 2>/dev/null
  for _ in 1 2 3 4 5; do rmdir "$folder" 2>/dev/null && break; sleep 0.2; done
  [[ -d $folder ]] && echo "  warning: could not remove $folder" || say "removed cgroup $folder"
done

# Hub test users.
for user in $(getent passwd | cut -d: -f1 | grep -E '^labkit-hub-'); do
  pkill -KILL -u "$user" 2>/dev/null
  userdel "$user" 2>/dev/null && say "deleted user $user"
done

# tracefs and debugfs last (a perf just killed may have held them), innermost first.
for mount in /sys/kernel/debug/tracing /sys/kernel/tracing /sys/kernel/debug; do
  if mountpoint -q "$mount"; then
    umount "$mount" 2>/dev/null && say "unmounted $mount" || echo "  warning: $mount is busy, left mounted"
  fi
done

shopt -s nullglob
leftovers=("${TMPDIR:-/tmp}"/labkit-*)
if (( ${#leftovers[@]} )); then
  rm -rf -- "${leftovers[@]}" && say "removed ${#leftovers[@]} labkit-* entries from ${TMPDIR:-/tmp}"
fi

if (( ${#undone[@]} == 0 )); then
  echo "first-run state: nothing to undo, this machine is as a fresh one"
else
  echo "first-run state: undid ${#undone[@]} thing(s) an earlier run left"
fi
