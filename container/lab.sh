#!/usr/bin/env bash
# `make lab` in a container: on a host that is not Linux (macOS, or Windows with make), or on
# Linux on request (`make lab CONTAINER=1`).  Builds container/Containerfile with Podman or
# Docker, runs it with the settings below, and prints the URL.
#
# Invariants:
# - Every setting the lab needs is named here once, each with its reason, and
#   .devcontainer/devcontainer.json holds the same ones (tests/install/test_container.py).
# - The student's work lives in a folder of the host (LAB_WORK, default lab-work/ in this
#   checkout, which git and the image build leave out), mounted at /lab, the container's
#   LABKIT_HOME: the container is removed when it stops, the work is not.
# - JupyterLab is reached on the host's 127.0.0.1 alone, with a token made here.
# - Written for bash 3.2 (macOS's own): no associative arrays, no mapfile.
#
#   LAB_ENGINE  podman or docker (default: podman where found, else docker)
#   LAB_PORT    the host's port (default 8888)      LAB_WORK  the work folder (default lab-work/)
#   LAB_CPUS    a cpuset, e.g. 0-3 (default: every CPU of the engine's machine, no quota)
#   LAB_PIDS    the pids limit (default below)      LAB_NO_BUILD=1  run the image as it is
#   LAB_IMAGE   run this image as it is, unbuilt (default: labkit-lab, built here), e.g.
#               labkit-lab:arm64 from container/image.sh arm64, through qemu-user
#   LAB_RUN_ARGS more arguments for `run`, for a host's own needs (split at spaces)
#   LAB_SECCOMP the seccomp profile (default container/seccomp.json; "engine": the engine's
#               own default, to see what it refuses: labkit doctor's seccomp line)
#
#   bash container/lab.sh                  JupyterLab, its URL printed
#   bash container/lab.sh labkit doctor    any command instead, with the same settings
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

engine=${LAB_ENGINE:-}
if [[ -z $engine ]]; then
  if command -v podman >/dev/null 2>&1; then engine=podman
  elif command -v docker >/dev/null 2>&1; then engine=docker
  else
    echo "error: neither podman nor docker is installed." >&2
    echo "  fix: install Docker Desktop (macOS, Windows), or Podman (podman machine init && podman machine start)" >&2
    exit 1
  fi
fi
image=${LAB_IMAGE:-labkit-lab}
port=${LAB_PORT:-8888}
work=${LAB_WORK:-$root/lab-work}
mkdir -p "$work"
work=$(cd "$work" && pwd)
volume="$work:/lab"
# On a Linux host with SELinux enforcing (Fedora): the work folder is relabelled for the container.
if [[ $(cat /sys/fs/selinux/enforce 2>/dev/null) == 1 ]]; then
  volume+=:z
fi

# The settings, each with why (docs/deploy.md's table has what each costs when missing).
settings=(
  # io_uring_setup/enter/register (the uring server) and perf_event_open (perf stat) get
  # through: Docker 25+ refuses io_uring whatever the capabilities (Podman's default, from
  # containers-common 0.50, names no io_uring call: ENOSYS), and the defaults give
  # perf_event_open only to a container granted CAP_SYS_ADMIN (Docker's: or CAP_PERFMON).
  --security-opt "seccomp=${LAB_SECCOMP:-$root/container/seccomp.json}"
  # notebook 05's network namespaces (unshare, ip netns) and the links between them (veth,
  # tc); CAP_NET_RAW: the lab's delay line (delay and loss where the kernel has no netem)
  # moves the link's frames on AF_PACKET sockets, and Podman's defaults leave it out;
  # CAP_PERFMON: perf past kernel.perf_event_paranoid (kernel stacks, tracepoints).
  --cap-add=SYS_ADMIN --cap-add=NET_ADMIN --cap-add=NET_RAW --cap-add=PERFMON
  # /proc/sys writable (Docker and Podman mount it read-only): the delay line turns IPv6
  # off on its link (net.ipv6.conf.*, a namespace's own); kernel.* stays the kernel's to
  # refuse a rootless container.  Docker has no narrower switch than this one.
  --security-opt systempaths=unconfined
  # a thread per client: the full profile's 10,000 connections, a thread each, and the
  # lab's own processes; a student's server that forks in a loop stops there.
  --pids-limit="${LAB_PIDS:-12288}"
  # experiment 2's 10,000 connections, a descriptor each on both sides (labkit doctor).
  --ulimit nofile=65536:65536
  # the student's work, outside the container.
  -v "$volume"
)
if [[ ${LAB_SECCOMP:-} == engine ]]; then
  settings=("${settings[@]:2}")
fi
if [[ -n ${LAB_CPUS:-} ]]; then
  settings+=(--cpuset-cpus="$LAB_CPUS")   # a CPU set, never a quota: a quota throttles both sides
fi
if [[ -n ${LAB_RUN_ARGS:-} ]]; then
  read -r -a more <<<"$LAB_RUN_ARGS"
  settings+=("${more[@]}")
fi
# On a Linux host with AppArmor (Ubuntu, Debian): the runtimes' default profile denies mount,
# which `ip netns add` needs (it bind-mounts the namespace under /run/netns).
if [[ $(cat /sys/module/apparmor/parameters/enabled 2>/dev/null) == Y ]]; then
  settings+=(--security-opt apparmor=unconfined)
fi

# The engine's machine (Docker Desktop's or podman machine's VM, or this host) needs 2 CPUs:
# server and client each pinned to one.
case $(basename "$engine") in
  podman*) cpus=$("$engine" info --format '{{.Host.CPUs}}' 2>/dev/null || echo "") ;;
  *) cpus=$("$engine" info --format '{{.NCPU}}' 2>/dev/null || echo "") ;;
esac
if [[ -z $cpus ]]; then
  echo "error: $engine does not answer (is its machine running? Docker Desktop: start it;" \
       "Podman: podman machine start)" >&2
  exit 1
fi
if (( cpus < 2 )); then
  echo "note: $engine's machine has $cpus CPU: server and client share it, and labkit doctor says so." \
       "Fix: give it 2 or more (Docker Desktop: Settings > Resources; podman machine set --cpus 4)"
fi

if [[ ${LAB_NO_BUILD:-} != 1 && -z ${LAB_IMAGE:-} ]]; then
  echo "Building the lab's image ($engine build -f container/Containerfile -t $image .): the first time" \
       "takes several minutes, later ones seconds."
  "$engine" build -f container/Containerfile -t "$image" .
fi

interactive=()
[[ -t 0 && -t 1 ]] && interactive=(-it)
if (( $# )); then
  exec "$engine" run --rm ${interactive[@]+"${interactive[@]}"} "${settings[@]}" "$image" "$@"
fi

token=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
echo
echo "The lab: open http://127.0.0.1:$port/lab?token=$token in your browser (in a few seconds)."
echo "Your work: $work (it stays when the lab stops).  Stop the lab with Ctrl-C."
echo
# JupyterLab on the host's loopback alone (it listens on the container's own network).
exec "$engine" run --rm ${interactive[@]+"${interactive[@]}"} --name "labkit-lab-$port" "${settings[@]}" \
  -p "127.0.0.1:$port:8888" -e "JUPYTER_TOKEN=$token" -e "LAB_PORT=$port" "$image"
