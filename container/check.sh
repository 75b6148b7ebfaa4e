#!/usr/bin/env bash
# The lab's container checked as a student gets it (`make container-check`; slow, so not in
# make test): the image built, then, each through container/lab.sh with its settings,
#   1. labkit doctor, with the lab's seccomp profile and with the engine's own: the second
#      names what it refuses and how to allow it;
#   2. io_uring (the uring server answering over loopback), perf's software counters
#      (perf stat), a link between two network namespaces (notebook 05's);
#   3. notebooks 00, 01, 02 and 05 run top to bottom in the quick profile (papermill), the
#      container's pids counted all the while (the highest count is printed);
#   4. JupyterLab: on the host's 127.0.0.1 alone, refusing a request without the token.
# It prints the image's size and build time.  Run as root, with Podman or Docker.
#
#   LAB_ENGINE=podman bash container/check.sh [notebooks...]    (default: 00 01 02 05)
set -euo pipefail
cd "$(dirname "$0")/.."
engine=${LAB_ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}
export LAB_ENGINE=$engine LAB_NO_BUILD=1
notebooks=("${@:-00 01 02 05}")
read -r -a notebooks <<<"${notebooks[*]}"
work=$(mktemp -d "${TMPDIR:-/tmp}/labkit-container-check.XXXXXX")
export LAB_WORK=$work
lab() { bash container/lab.sh "$@"; }

echo "== build ($engine)"
start=$(date +%s)
"$engine" build -q -f container/Containerfile -t labkit-lab . >/dev/null
echo "built in $(( $(date +%s) - start )) s (layers cached where nothing changed);" \
     "size: $("$engine" image inspect --format '{{.Size}}' labkit-lab | awk '{printf "%.0f MB", $1 / 1e6}')"

echo "== labkit doctor, with the lab's seccomp profile"
lab labkit doctor | tee "$work/doctor.txt"
grep -q "^ok    seccomp " "$work/doctor.txt"
grep -q "^ok    namespaces " "$work/doctor.txt"
echo "== labkit doctor, with $engine's default seccomp profile"
LAB_SECCOMP=engine lab labkit doctor | tee "$work/doctor-engine.txt" || true
sed -n '/seccomp/,/^[a-zA-Z]/p' "$work/doctor-engine.txt" | head -8

echo "== io_uring, perf, namespaces"
lab sh -c '
set -e
cd /opt/labkit/tests
python - <<"EOF"
import serverproc
from labkit import netlink
with serverproc.running("uring", service="echo") as server, serverproc.Client(server.port) as client:
    client.send(b"hello from io_uring\n")
    print("the uring server answers over loopback:", client.line())
with netlink.Link(rate="1gbit", delay_ms=1):
    print("a link between two network namespaces: made, and removed")
EOF
perf stat -x, -e task-clock,context-switches,cpu-migrations,page-faults,cycles,instructions -- sleep 0.1 2>&1 \
  | awk -F, "{print \"perf stat: \" \$3 \" = \" \$1}"
'

echo "== notebooks ${notebooks[*]}, quick profile (papermill), the container's pids counted"
lab sh -c '
set -e
pids=$(find /sys/fs/cgroup -maxdepth 2 -name pids.current | head -1)
[ -n "$pids" ] || { echo "no pids.current in the container"; exit 1; }
(peak=0; while :; do n=$(cat "$pids"); if [ "$n" -gt "$peak" ]; then peak=$n; echo "$peak" >/lab/pids-peak; fi; sleep 0.2; done) &
counter=$!
for n in '"${notebooks[*]}"'; do
  nb=$(ls /lab/notebooks/${n}_*.ipynb)
  start=$(date +%s)
  papermill -k labkit -p profile quick --cwd /lab/notebooks "$nb" "/lab/run-$(basename "$nb")" >"/lab/papermill-$n.log" 2>&1 \
    || { tail -30 "/lab/papermill-$n.log"; exit 1; }
  echo "$(basename "$nb"): ran in $(( $(date +%s) - start )) s; what it says it could not measure:"
  grep -o "not measurable[^\"<]*" "/lab/run-$(basename "$nb")" | cut -c1-150 | sort | uniq -c | head -5
done
kill "$counter"
echo "the highest pids count of the container: $(cat /lab/pids-peak) ($pids)"
'

echo "== JupyterLab on 127.0.0.1 with a token"
port=18888
LAB_PORT=$port bash container/lab.sh >"$work/lab.log" 2>&1 &
for _ in $(seq 90); do curl -s -o /dev/null "http://127.0.0.1:$port/api/status" && break; sleep 1; done
token=$(sed -n 's/.*token=\([0-9a-f]*\).*/\1/p' "$work/lab.log" | head -1)
without=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/status")
with=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: token $token" "http://127.0.0.1:$port/api/status")
echo "without the token: HTTP $without; with it: HTTP $with"
ss -ltnH "sport = :$port" | awk '{print "listening on the host: " $4}'
"$engine" stop -t 5 "labkit-lab-$port" >/dev/null
wait || true
[[ $without == 403 && $with == 200 ]]
rm -rf "$work"
echo "container-check: done"
