/* loadgen.c -- the lab's load generator: setup and main (its flags: options.c).
 *
 *   loadgen --port P [--host 127.0.0.1] --clients N --requests R
 *           [--service top|echo|sink] [--k K] [--size BYTES]
 *           [--timeout S] [--connect-timeout S]
 *           [--engine threads|events] [--threads N] [--rate R] [--duration S]
 *           [--arrivals even|poisson]
 *           [--warmup S|N] [--reconnect] [--idle N] [--vary uniform|log] [--seed N]
 *           [--bad N [--bad-kind silent|slow|drip] [--bad-interval S]]
 *           [--nodelay on|off] [--strategy many|writev|single|msg_more|cork
 *            --nbufs N --bufsize B --repetitions R]
 *
 * Two drivers run the same exchanges (exchange.c):
 *   threads  one thread per connection, like the seed reports' client
 *            (the default, for experiment 1's fidelity to the seeds);
 *   events   event loops (epoll), one per CPU it may run on (--threads N),
 *            each with its own connections, so one process holds 10,000
 *            connections and does not become the bottleneck of a many-core
 *            server; it alone does open loop (--rate), warm-up, idle and
 *            misbehaving (--bad) connections, and samples the exchanges in
 *            flight (Little's law: inflight.mean = completed_rps x latency).
 * "What breaks first": --bad N adds connections that connect before every
 * other one and then never read (silent), read 1 KiB per --bad-interval
 * (slow) or send their request a byte per --bad-interval (drip, Slowloris);
 * their fate is reported apart ("bad") and never fails the run.  Every
 * connect is timed (connect_us, connect_histogram): a dropped SYN shows as a
 * connect of about 1 s, 2 s, 3 s ... (the kernel's SYN retransmissions).  An
 * open loop beyond what the server can do still ends by the last due time +
 * --timeout, with the exchanges never sent counted (requests_not_sent).
 * Closed loop: each connection does its exchanges back to back.  Open loop
 * (--rate): exchanges are due at times spread over the connections, evenly
 * or as a Poisson process (--arrivals, arrivals.h), fixed before the run,
 * and latency is measured from when each was due, so a server that stalls
 * cannot hide the requests it held back (coordinated omission, as in wrk2);
 * the send-to-reply figure is reported beside it.
 * --reconnect (events): every exchange on a new connection (connect, send,
 * read the whole reply, close), HTTP/1.0 style, for the thundering-herd
 * experiment: in open loop each connection is opened when its exchange falls
 * due, so new connections arrive one at a time, 1/rate apart, instead of all
 * at the start gate; in closed loop each client does its exchanges back to
 * back, each on a fresh connection.  The connect is part of the exchange: the
 * latency (from the due time; closed loop: from the connect() call) includes
 * it, the send-to-reply figure does not.  A failed connect fails that one
 * exchange and the run goes on.  JSON: "reconnect", and "connections_opened"
 * (the connects made for exchanges); connections_ok/failed/lost then count
 * client slots (report.c).
 *
 * stdout gets exactly one JSON object (counts, elapsed time, latency
 * percentiles, a histogram and one of each half of the run's plan, failures
 * by name, the client's own getrusage);
 * human messages go to stderr.  Exit 0 if every connection and request
 * succeeded, 1 if some failed, 2 for bad arguments or a client count that
 * cannot fit.
 */
#include "loadgen/loadgen.h"

#include "common/net.h"
#include "common/util.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#define FD_RESERVE 16                  /* descriptors libc/sanitizers/epoll may open */

/* ----------------------------------------------------------------- setup */

static long open_descriptors(void)
{
    DIR *d = opendir("/proc/self/fd");
    long n = 0;
    if (!d)
        return 3;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory's own descriptor */
}

/* One descriptor per connection must fit under RLIMIT_NOFILE.  Raise the
 * soft limit as far as the hard limit allows; if that is not enough, refuse
 * with the number that fits. */
static void ensure_descriptors(long clients, long idle, long bad)
{
    struct rlimit lim;
    long in_use = open_descriptors() + FD_RESERVE;
    long need = clients + idle + bad + in_use;
    if (getrlimit(RLIMIT_NOFILE, &lim) < 0)
        die_errno("getrlimit(RLIMIT_NOFILE)");
    if (lim.rlim_cur != RLIM_INFINITY && (long)lim.rlim_cur < need) {
        long now = set_fd_limit(need);
        if (now < 0)
            now = (long)lim.rlim_cur;
        if (now < need) {
            long fit = now > in_use ? now - in_use : 0;
            warn("--clients %ld%s needs %ld open files, but the limit is %ld "
                 "(hard limit %ld): at most %ld %s fit.", clients,
                 bad ? (idle ? ", --idle and --bad" : " and --bad") : idle ? " and --idle" : "",
                 need, now, lim.rlim_max == RLIM_INFINITY ? -1L : (long)lim.rlim_max, fit,
                 bad ? (idle ? "connections (clients + idle + bad)" : "connections (clients + bad)")
                 : idle ? "connections (clients + idle)" : "clients");
            warn("ask for %ld connections or fewer, or raise the limit first "
                 "(ulimit -n %ld, or LimitNOFILE= / limits.conf as root)", fit, need);
            exit(EXIT_BAD_ARGS);
        }
    }
}

/* Die with the parent (a notebook kernel, labkit): no orphans left running. */
static void die_with_parent(void)
{
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
        warn_errno("prctl(PR_SET_PDEATHSIG)");
    if (getppid() != parent)
        exit(EXIT_FAILURE); /* the parent is already gone */
}

/* CPU time of every thread of this process so far, those that ended included. */
static double process_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    set_program_name(argv[0]);
    die_with_parent();
    if (ignore_sigpipe() < 0)
        die_errno("ignoring SIGPIPE");

    struct options o = options_parse(argc, argv);
    struct net_addr addr;
    if (net_resolve(o.host, (int)o.port, &addr) < 0)
        options_fail("--host '%s': not an address this machine can resolve", o.host);
    ensure_descriptors(o.clients, o.idle, o.bad);
    struct workload work;
    workload_make(&work, o.service, o.k, o.size, o.vary, o.seed);
    work.spin_us = o.spin_us;
    work.spin_dist = o.spin_dist;

    static struct outcome out; /* two histograms: too big for the stack */
    outcome_init(&out);
    double cpu_before = process_cpu_s();
    uint64_t wall_before = now_ns();
    if (o.strategy != STRATEGY_NONE)
        strategy_drive(&o, &addr, &work, &out);
    else if (o.engine == ENGINE_EVENTS)
        events_drive(&o, &addr, &work, &out);
    else
        threads_drive(&o, &addr, &work, &out);
    out.window_wall_s = (double)(now_ns() - wall_before) / 1e9;
    out.window_cpu_s = process_cpu_s() - cpu_before;
    int code = report_print(&o, &out);

    outcome_free(&out);
    workload_free(&work);
    return code;
}
