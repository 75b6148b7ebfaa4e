"""Network namespaces joined by a veth link: "different hosts" on one machine.

    with netlink.Link(rate="100mbit", delay_ms=5) as link:
        server = procs.start_server(ServerSpec("epoll", "echo", flags={"host": link.server_address}),
                                    prefix=link.server_prefix)
        run = procs.run_load(load, server.port, host=link.server_address, prefix=link.client_prefix)

A Link is a server namespace (lk<id>s) and a client namespace (lk<id>c), 198.18.0.1/30
and 198.18.0.2/30 (RFC 2544's range for network benchmarking), with no route but the
link's own, checked before a byte is sent.  `rate` shapes both directions with tbf.
Delay, jitter and loss come from netem where the kernel has sch_netem; where it has not,
from the lab's own delay line (csrc/link/delayline.c) in a third namespace (lk<id>m)
between two veth pairs:

    same wire, no delay or loss:   [lk<id>s] a ==veth== b [lk<id>c]
    netem:                         [lk<id>s] a ==veth== b [lk<id>c], netem on a and b
    delay line:                    [lk<id>s] a ==veth== x [lk<id>m: delayline] y ==veth== b [lk<id>c]

`emulator` chooses ("auto": netem where it exists, else the delay line); `shaping`
names what was used, for the results row.  Names carry a random id, so two runs at
once never collide.

As root the namespaces are named ones in the host's /run/netns.  A normal user's Link
lives in a user namespace of its own (UserNamespace: root there, a private /run), where
the kernel allows unprivileged user namespaces; where it does not, the refusal names the
sysctl that forbids them.  Either way every command and process goes through the Link's
`enter` and `prefix`.

Every Link is recorded in build/run/netns-<id>.json (names, owner pid) before it is
made, and removed with it: on leaving the `with`, on an exception, at exit.  A named
namespace outlives every process in it (its /run/netns mount holds it), so as root each
Link also has a reaper: a shell that waits, with SIGTERM as its death signal, and deletes
the Link's namespaces and record when its owner dies however it dies (-9, or ipykernel's
os._exit when papermill is killed, where no atexit runs).  Where setpriv is missing there
is no reaper, and `labkit doctor --clean` finds the record whose owner is gone and deletes
the namespaces (their veth ends go with them).  A normal user's namespaces go with their
user namespace.

  host.py       what this machine allows: ip, tc rates, netem, the delay line, user namespaces
  link.py       the Link: made, shaped, read back, removed
  leftovers.py  records, the reaper, the Links to remove at exit, what a crash left
  figure.py     topology(): a Link's namespaces drawn
"""

from .figure import topology
from .host import (CLIENT_ADDRESS, PREFIX_LEN, ROOT_FIX, SERVER_ADDRESS, UserNamespace, delay_line_problem,
                   netem_available, rate_bits, unprivileged_fix, user_namespaces_allowed)
from .leftovers import RECORD_GLOB, clean_leftovers, lab_namespaces, leftover_records
from .link import EMULATORS, Link

__all__ = ["CLIENT_ADDRESS", "EMULATORS", "PREFIX_LEN", "RECORD_GLOB", "ROOT_FIX", "SERVER_ADDRESS", "Link",
           "UserNamespace", "clean_leftovers", "delay_line_problem", "lab_namespaces", "leftover_records",
           "netem_available", "rate_bits", "topology", "unprivileged_fix", "user_namespaces_allowed"]
