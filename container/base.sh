#!/usr/bin/env bash
# The lab image's base, made here from Debian's packages when no image registry is reachable:
# Debian 12 (minbase, as debian:bookworm-slim) for one architecture, made by mmdebstrap and
# imported into Podman (or Docker) under the name container/Containerfile starts FROM, so the
# recipe builds unchanged.  Where Docker Hub is reachable this is not needed: the build pulls
# the real debian:bookworm-slim, which is multi-architecture.
#
#   sudo bash container/base.sh [amd64|arm64]     (default: this machine's architecture)
#
# Invariants:
# - The root is minbase Debian 12 from the mirror this host's apt uses; a foreign
#   architecture needs qemu-user-static (binfmt_misc) and arch-test, for mmdebstrap's
#   maintainer scripts and for the image build's RUN steps.
# - A certificate authority this host adds of its own (/usr/local/share/ca-certificates, a
#   TLS-intercepting proxy's) and its /etc/pip.conf go into the base, so that the build's
#   apt and pip trust what the host trusts; a base pulled from a registry has neither.
# - The name is docker.io/library/debian:bookworm-slim (Podman's local store answers it before
#   any registry; `--pull=never` keeps the build from asking one), suffixed -ARCH when the
#   architecture is not this machine's; the image says its architecture (`import --arch`), as a
#   pulled one does.
set -euo pipefail
arch=${1:-$(dpkg --print-architecture)}
engine=${LAB_ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}
name=docker.io/library/debian:bookworm-slim
[[ $arch == "$(dpkg --print-architecture)" ]] || name+=-$arch
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}

hooks=()
extra=()
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  extra+=(--include=ca-certificates)
  hooks+=(--customize-hook='copy-in /usr/local/share/ca-certificates /usr/local/share'
          --customize-hook='chroot "$1" update-ca-certificates >/dev/null')
fi
if [[ -f /etc/pip.conf ]]; then
  hooks+=(--customize-hook='copy-in /etc/pip.conf /etc')
fi
# As debuerreotype slims debian:bookworm-slim: no documentation, no apt lists left behind.
hooks+=(--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin')

# A foreign architecture: mmdebstrap runs the root's maintainer scripts through binfmt_misc
# (qemu-user-static) and asks arch-test first whether that works.
if [[ $arch != "$(dpkg --print-architecture)" ]]; then
  missing=""
  command -v arch-test >/dev/null || missing+=" arch-test"
  compgen -G "/usr/bin/qemu-*-static" >/dev/null || missing+=" qemu-user-static binfmt-support"
  if [[ -n $missing ]]; then
    echo "error: a base for $arch needs:$missing.  fix: sudo apt-get install -y$missing" >&2
    exit 1
  fi
  if ! arch-test "$arch" >/dev/null 2>&1; then
    echo "error: this machine cannot run $arch programs (binfmt_misc)." \
         "fix: sudo update-binfmts --enable; arch-test $arch says why" >&2
    exit 1
  fi
fi

case $(basename "$engine") in
  podman*) platform=(--arch "$arch") ;;
  *) platform=(--platform "linux/$arch") ;;
esac

echo "base: mmdebstrap bookworm ($arch, minbase, from $mirror) -> $engine image $name"
# The root goes to a file first: a failed mmdebstrap then imports nothing (a pipe would leave
# an empty image under the base's name).
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/labkit-base.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
tarball=$scratch/$arch.tar
mmdebstrap --variant=minbase --architectures="$arch" --format=tar \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  "${extra[@]}" "${hooks[@]}" bookworm "$tarball" "deb $mirror bookworm main"
"$engine" import "${platform[@]}" --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$name"
"$engine" image inspect --format '{{.Architecture}} {{.Size}}' "$name"
