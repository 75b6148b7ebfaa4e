#!/usr/bin/env bash
# The lab's image for one architecture (`make container-image ARCH=arm64`): amd64 for an
# Intel or AMD laptop, arm64 for Apple Silicon (and arm64 Linux).  On a laptop `make lab`
# builds the native one itself (container/lab.sh); this builds either one on any host, a
# foreign one through qemu-user, and prints its size and build time.
#
#   bash container/image.sh [amd64|arm64]     (default: this machine's architecture)
#
# Invariants:
# - The recipe is container/Containerfile, unchanged: only its base and --platform differ.
# - The base is the one container/base.sh made for that architecture where there is one here
#   (no registry reachable: `--pull=never`); otherwise the engine pulls debian:bookworm-slim
#   for that platform.
# - The image is labkit-lab for this machine's architecture (the one lab.sh runs) and
#   labkit-lab:ARCH for a foreign one (LAB_IMAGE=labkit-lab:arm64 bash container/lab.sh runs
#   it, through qemu-user).
# - A foreign architecture needs binfmt_misc for it (qemu-user-static and binfmt-support on
#   Debian; Docker Desktop and podman machine have it): every RUN step of the build runs
#   under qemu-user, several times slower than natively.
set -euo pipefail
cd "$(dirname "$0")/.."
native=$(dpkg --print-architecture 2>/dev/null || uname -m)
case $native in x86_64) native=amd64 ;; aarch64) native=arm64 ;; esac
arch=${1:-$native}
case $arch in
  amd64|arm64) ;;
  *) echo "error: the lab's image is built for amd64 or arm64, not '$arch'" >&2; exit 2 ;;
esac
engine=${LAB_ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}

base=docker.io/library/debian:bookworm-slim
image=labkit-lab
if [[ $arch != "$native" ]]; then
  base+=-$arch
  image+=:$arch
  qemu=aarch64
  [[ $arch == amd64 ]] && qemu=x86_64
  if [[ $(uname -s) == Linux && ! -e /proc/sys/fs/binfmt_misc/qemu-$qemu ]]; then
    echo "error: this machine cannot run $arch programs, which the build's RUN steps are." \
         "fix: sudo apt-get install -y qemu-user-static binfmt-support" >&2
    exit 1
  fi
fi
args=(--platform "linux/$arch")
if "$engine" image exists "$base" 2>/dev/null || "$engine" image inspect "$base" >/dev/null 2>&1; then
  args+=(--pull=never --build-arg "BASE=$base")
  echo "base: $base (made here by container/base.sh $arch)"
elif [[ $arch != "$native" ]]; then
  args+=(--build-arg "BASE=docker.io/library/debian:bookworm-slim")
fi

echo "building $image for linux/$arch with $engine (through qemu-user where it is not this machine's)"
start=$(date +%s)
"$engine" build "${args[@]}" -f container/Containerfile -t "$image" .
took=$(( $(date +%s) - start ))
size=$("$engine" image inspect --format '{{.Size}}' "$image")
echo "image $image: $("$engine" image inspect --format '{{.Os}}/{{.Architecture}}' "$image")," \
     "$(awk -v s="$size" 'BEGIN {printf "%.2f GB", s / 1e9}'), built in $took s"
