/* loadgen.c -- the lab's load generator: options, setup, main.
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
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#define EXIT_BAD_ARGS 2
#define MAX_CLIENTS 100000L
#define MAX_REQUESTS 10000000L
#define MAX_SAMPLES 20000000L          /* threads: N x R latencies kept, 160 MB at most */
#define MAX_SIZE (256L * 1024 * 1024)  /* echo/sink payload per request */
#define MAX_RATE 10000000.0            /* open loop: total requests per second */
#define MAX_SECONDS 3600.0             /* --timeout, --connect-timeout, --duration, --warmup Ns */
#define FD_RESERVE 16                  /* descriptors libc/sanitizers/epoll may open */
#define MAX_THREADS 1024               /* events: event loops */

static long cpus_allowed(void);

/* ------------------------------------------------------------------ options */

static void usage(FILE *to)
{
    fprintf(to,
        "usage: loadgen --port P --clients N (--requests R | --rate X --duration S) [options]\n"
        "  --host H               server address (default 127.0.0.1; ::1 works)\n"
        "  --service top|echo|sink|spin  workload (default top)\n"
        "  --k K                  top: processes per reply, 1..1000 (default 2)\n"
        "  --size BYTES           echo/sink: payload per request (default 64)\n"
        "  --vary none|uniform|log  echo/sink: each connection's payload size drawn from\n"
        "                         1024..--size, uniformly or log-uniformly (uploads);\n"
        "                         none (the default): every payload is --size bytes\n"
        "  --seed N               the draw's seed: the same seed, the same sizes (default 1)\n"
        "  --spin-us US           spin: each request keeps the server busy US microseconds on\n"
        "                         average, 0..1000000 (default 0: the loop's own cost)\n"
        "  --spin-dist fixed|exp  spin: every request US (default), or each drawn from the\n"
        "                         exponential distribution of mean US (from --seed)\n"
        "  --nodelay on|off       TCP_NODELAY on each connection (default on; off: Nagle)\n"
        "write strategies (sink; one blocking connection per client, seed 004):\n"
        "  --strategy S           how each repetition is written: many (a write per buffer),\n"
        "                         writev (one writev), single (copied, one write), msg_more\n"
        "                         (MSG_MORE on all but the last), cork (TCP_CORK around them)\n"
        "  --nbufs N --bufsize B  a repetition is N buffers of B bytes (N <= 1024, B <= 65536,\n"
        "                         N x B <= 1 MiB); --shape NxB says both at once\n"
        "  --repetitions R        repetitions per request (default 1); the body is R x N x B\n"
        "  --timeout S            bound on each exchange, seconds (default 10);\n"
        "                         behind an iterative server a client waits for\n"
        "                         all earlier clients, so raise it for big sweeps\n"
        "  --connect-timeout S    bound on each connect, seconds (default 5)\n"
        "  --engine threads|events  one thread per connection (default), or one\n"
        "                         event-driven thread (epoll) for many connections\n"
        "events engine only:\n"
        "  --threads N            event loops, each with its own connections (default:\n"
        "                         one per CPU this process may run on, at most one per\n"
        "                         connection)\n"
        "  --rate X               open loop: X requests/s in total, spread over the\n"
        "                         connections; latency counted from when each was due\n"
        "  --duration S           open loop: run S seconds instead of --requests\n"
        "  --arrivals even|poisson  open loop: requests evenly spaced, 1/X apart (the\n"
        "                         default), or a Poisson process of rate X: exponential\n"
        "                         gaps drawn from --seed (at most 20,000,000 requests)\n"
        "  --warmup S|N           leave out of the latency figures the exchanges due\n"
        "                         in the first S seconds ('2s', '0.5s') or the first\n"
        "                         N to complete ('1000')\n"
        "  --reconnect            a new connection per exchange: connect, send, read the\n"
        "                         whole reply, close (HTTP/1.0 style); open loop: each\n"
        "                         connect happens when its exchange falls due, and the\n"
        "                         latency from the due time includes it; no connecting\n"
        "                         before the gate (idle and bad connections still do);\n"
        "                         JSON \"connections_opened\": the connects made\n"
        "  --idle N               also hold N connections open and silent all along\n"
        "  --bad N                also N misbehaving connections: they connect before all\n"
        "                         the others, misbehave from the start gate until the active\n"
        "                         ones are done, never count as failures (JSON \"bad\")\n"
        "  --bad-kind K           silent (default): write requests while the socket takes\n"
        "                         them, never read; slow: the same, reading at most 1024\n"
        "                         bytes per interval; drip: send the request one byte per\n"
        "                         interval (Slowloris), read what comes back\n"
        "  --bad-interval S       slow/drip: seconds between reads/bytes (default 1)\n"
        "  --describe             print the flags' limits as JSON, and exit\n"
        "Prints one JSON object on stdout: counts, latencies (histogram, and histogram_halves:\n"
        "the first and second half of the plan; latency_batches: [samples, mean us] of each\n"
        "twentieth of the plan, in order; latency_batch_quantiles: {\"20\", \"10\", \"5\"}, the\n"
        "plan in that many batches, each [samples, p50, p90, p99, p999 us]; latency_batch_below:\n"
        "{p50, p90, p99, p999}, each twentieth's samples at or below the run's percentile, and\n"
        "latency_batch_under: strictly below the bucket that holds it),\n"
        "connect times (connect_us, connect_histogram, connects_over_1s/3s), in flight\n"
        "(events), the bad connections; requests_measured: the exchanges completed_rps\n"
        "divides.  Open loop only (null otherwise): requests_due_in_window, the schedule's\n"
        "exchanges due in the measured window, sent or not, and measured_window_ns, its start\n"
        "and end after the first due time; send_lateness_us: {p50, p99, max, samples}, how\n"
        "late the generator started each exchange whose connection was free at its due time\n"
        "(not --reconnect).\n"
        "Exit 0: all succeeded, 1: some failed, 2: bad arguments.\n");
}

_Noreturn static void bad_args(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad_args(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    warn("%s", msg);
    warn("run 'loadgen --help' for the options");
    exit(EXIT_BAD_ARGS);
}

static long parse_count(const char *flag, const char *text, long min, long max)
{
    long v;
    if (parse_long(text, min, max, &v) < 0)
        bad_args("%s '%s': expected a whole number from %ld to %ld", flag, text, min, max);
    return v;
}

/* A number in (0, max]; *end points past it (to a unit, if one follows). */
static bool parse_number(const char *text, double max, double *out, char **end)
{
    errno = 0;
    double v = strtod(text, end);
    if (*end == text || errno != 0 || !(v > 0 && v <= max))
        return false;
    *out = v;
    return true;
}

static double parse_seconds(const char *flag, const char *text)
{
    char *end;
    double v;
    if (!parse_number(text, MAX_SECONDS, &v, &end) || *end != '\0')
        bad_args("%s '%s': expected seconds, more than 0 and at most %.0f", flag, text, MAX_SECONDS);
    return v;
}

/* "--warmup 2s" (seconds) or "--warmup 1000" (requests). */
static void parse_warmup(const char *text, struct options *o)
{
    char *end;
    double v;
    if (parse_number(text, MAX_SECONDS, &v, &end) && strcmp(end, "s") == 0) {
        o->warmup_s = v;
        return;
    }
    if (strchr(text, '.'))
        bad_args("--warmup '%s': seconds need an 's' ('%ss'); a count is a whole number",
                 text, text);
    o->warmup_requests = parse_count("--warmup", text, 0, MAX_REQUESTS * MAX_CLIENTS);
}

/* --describe: the limits the flags are checked against, as JSON, so that labkit checks a
 * value where the student types it from these numbers, not from a copy of them. */
static _Noreturn void describe(void)
{
    printf("{\"flags\": {"
           "\"clients\": {\"min\": 1, \"max\": %ld}, \"requests\": {\"min\": 0, \"max\": %ld}, "
           "\"size\": {\"min\": 1, \"max\": %ld}, \"threads\": {\"min\": 1, \"max\": %d}, "
           "\"idle\": {\"min\": 0, \"max\": %ld}, \"rate\": {\"above\": 0, \"max\": %.17g}, "
           "\"timeout\": {\"above\": 0, \"max\": %.17g}, \"connect-timeout\": {\"above\": 0, \"max\": %.17g}, "
           "\"duration\": {\"above\": 0, \"max\": %.17g}, \"nbufs\": {\"min\": 1, \"max\": %d}, "
           "\"bufsize\": {\"min\": 1, \"max\": %ld}, \"bad\": {\"min\": 0, \"max\": %ld}, "
           "\"bad-interval\": {\"above\": 0, \"max\": %.17g}, \"spin-us\": {\"min\": 0, \"max\": %ld}}, "
           "\"repetition_bytes_max\": %ld, \"threads_engine_samples_max\": %ld, "
           "\"bad_kinds\": [\"%s\", \"%s\", \"%s\"], \"connect_burst_limit\": %d, "
           "\"inflight_interval_ms\": %.17g}\n",
           MAX_CLIENTS, MAX_REQUESTS, MAX_SIZE, MAX_THREADS, MAX_CLIENTS, MAX_RATE,
           MAX_SECONDS, MAX_SECONDS, MAX_SECONDS, MAX_NBUFS, MAX_BUFSIZE, MAX_CLIENTS, MAX_SECONDS, SPIN_MAX_US,
           MAX_REPETITION_BYTES, MAX_SAMPLES, bad_kind_names[BAD_SILENT], bad_kind_names[BAD_SLOW],
           bad_kind_names[BAD_DRIP], MAX_CONNECTING, (double)INFLIGHT_INTERVAL_NS / 1e6);
    exit(0);
}

static struct options parse_options(int argc, char **argv)
{
    static const struct option long_opts[] = {
        { "host", required_argument, NULL, 'H' },
        { "port", required_argument, NULL, 'p' },
        { "clients", required_argument, NULL, 'c' },
        { "requests", required_argument, NULL, 'r' },
        { "service", required_argument, NULL, 's' },
        { "k", required_argument, NULL, 'k' },
        { "size", required_argument, NULL, 'b' },
        { "timeout", required_argument, NULL, 't' },
        { "connect-timeout", required_argument, NULL, 'T' },
        { "engine", required_argument, NULL, 'e' },
        { "threads", required_argument, NULL, 'j' },
        { "rate", required_argument, NULL, 'R' },
        { "duration", required_argument, NULL, 'd' },
        { "arrivals", required_argument, NULL, 'A' },
        { "warmup", required_argument, NULL, 'w' },
        { "idle", required_argument, NULL, 'i' },
        { "reconnect", no_argument, NULL, 'C' },
        { "bad", required_argument, NULL, 'z' },
        { "bad-kind", required_argument, NULL, 'Z' },
        { "bad-interval", required_argument, NULL, 'I' },
        { "vary", required_argument, NULL, 'v' },
        { "spin-us", required_argument, NULL, 'u' },
        { "spin-dist", required_argument, NULL, 'U' },
        { "seed", required_argument, NULL, 'S' },
        { "nodelay", required_argument, NULL, 'N' },
        { "strategy", required_argument, NULL, 'W' },
        { "nbufs", required_argument, NULL, 'n' },
        { "bufsize", required_argument, NULL, 'B' },
        { "repetitions", required_argument, NULL, 'P' },
        { "shape", required_argument, NULL, 'X' },
        { "help", no_argument, NULL, 'h' },
        { "describe", no_argument, NULL, 'D' },
        { 0 },
    };
    struct options o = {
        .host = "127.0.0.1", .port = -1, .clients = -1, .requests = -1,
        .service = SERVICE_TOP, .k = 2, .size = 64,
        .timeout_s = 10, .connect_timeout_s = 5, .engine = ENGINE_THREADS, .seed = 1,
        .nodelay = true, .nbufs = -1, .bufsize = -1, .repetitions = 1,
        .bad_kind = BAD_SILENT, .bad_interval_s = 1.0,
    };
    const char *events_only = NULL; /* the first flag that needs --engine events */
    bool arrivals_given = false, spin_given = false;
    int opt;
    char *end;

    opterr = 0; /* we word the messages ourselves */
    while ((opt = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'H': o.host = optarg; break;
        case 'p': o.port = parse_count("--port", optarg, 1, 65535); break;
        case 'c': o.clients = parse_count("--clients", optarg, 1, MAX_CLIENTS); break;
        case 'r': o.requests = parse_count("--requests", optarg, 0, MAX_REQUESTS); break;
        case 'k': o.k = parse_count("--k", optarg, 1, 1000); break;
        case 'b': o.size = parse_count("--size", optarg, 1, MAX_SIZE); break;
        case 't': o.timeout_s = parse_seconds("--timeout", optarg); break;
        case 'T': o.connect_timeout_s = parse_seconds("--connect-timeout", optarg); break;
        case 's':
            if (strcmp(optarg, "top") == 0) o.service = SERVICE_TOP;
            else if (strcmp(optarg, "echo") == 0) o.service = SERVICE_ECHO;
            else if (strcmp(optarg, "sink") == 0) o.service = SERVICE_SINK;
            else if (strcmp(optarg, "spin") == 0) o.service = SERVICE_SPIN;
            else bad_args("--service '%s': expected top, echo, sink or spin", optarg);
            break;
        case 'e':
            if (strcmp(optarg, "threads") == 0) o.engine = ENGINE_THREADS;
            else if (strcmp(optarg, "events") == 0) o.engine = ENGINE_EVENTS;
            else bad_args("--engine '%s': expected threads or events", optarg);
            break;
        case 'j':
            o.threads = parse_count("--threads", optarg, 1, MAX_THREADS);
            events_only = events_only ? events_only : "--threads";
            break;
        case 'R':
            if (!parse_number(optarg, MAX_RATE, &o.rate_rps, &end) || *end != '\0')
                bad_args("--rate '%s': expected requests per second, more than 0 and at "
                         "most %.0f", optarg, MAX_RATE);
            events_only = events_only ? events_only : "--rate";
            break;
        case 'd':
            o.duration_s = parse_seconds("--duration", optarg);
            events_only = events_only ? events_only : "--duration";
            break;
        case 'A':
            if (strcmp(optarg, arrival_kind_names[ARRIVALS_EVEN]) == 0) o.arrivals = ARRIVALS_EVEN;
            else if (strcmp(optarg, arrival_kind_names[ARRIVALS_POISSON]) == 0) o.arrivals = ARRIVALS_POISSON;
            else bad_args("--arrivals '%s': expected even or poisson", optarg);
            arrivals_given = true;
            break;
        case 'w':
            parse_warmup(optarg, &o);
            events_only = events_only ? events_only : "--warmup";
            break;
        case 'i':
            o.idle = parse_count("--idle", optarg, 0, MAX_CLIENTS);
            events_only = events_only ? events_only : "--idle";
            break;
        case 'C':
            o.reconnect = true;
            events_only = events_only ? events_only : "--reconnect";
            break;
        case 'z':
            o.bad = parse_count("--bad", optarg, 0, MAX_CLIENTS);
            events_only = events_only ? events_only : "--bad";
            break;
        case 'Z':
            if (strcmp(optarg, "silent") == 0) o.bad_kind = BAD_SILENT;
            else if (strcmp(optarg, "slow") == 0) o.bad_kind = BAD_SLOW;
            else if (strcmp(optarg, "drip") == 0) o.bad_kind = BAD_DRIP;
            else bad_args("--bad-kind '%s': expected silent, slow or drip", optarg);
            events_only = events_only ? events_only : "--bad-kind";
            break;
        case 'I':
            o.bad_interval_s = parse_seconds("--bad-interval", optarg);
            events_only = events_only ? events_only : "--bad-interval";
            break;
        case 'u': o.spin_us = parse_count("--spin-us", optarg, 0, SPIN_MAX_US); spin_given = true; break;
        case 'U':
            if (strcmp(optarg, spin_dist_names[SPIN_FIXED]) == 0) o.spin_dist = SPIN_FIXED;
            else if (strcmp(optarg, spin_dist_names[SPIN_EXP]) == 0) o.spin_dist = SPIN_EXP;
            else bad_args("--spin-dist '%s': expected fixed or exp", optarg);
            spin_given = true;
            break;
        case 'v':
            if (strcmp(optarg, "none") == 0) o.vary = VARY_NONE;
            else if (strcmp(optarg, "uniform") == 0) o.vary = VARY_UNIFORM;
            else if (strcmp(optarg, "log") == 0) o.vary = VARY_LOG;
            else bad_args("--vary '%s': expected none, uniform or log", optarg);
            break;
        case 'S': o.seed = (unsigned long)parse_count("--seed", optarg, 0, LONG_MAX); break;
        case 'N':
            if (strcmp(optarg, "on") == 0) o.nodelay = true;
            else if (strcmp(optarg, "off") == 0) o.nodelay = false;
            else bad_args("--nodelay '%s': expected on or off", optarg);
            break;
        case 'W': {
            o.strategy = STRATEGY_NONE;
            for (int s = STRATEGY_MANY; s <= STRATEGY_CORK; s++)
                if (strcmp(optarg, strategy_names[s]) == 0)
                    o.strategy = (enum strategy)s;
            if (o.strategy == STRATEGY_NONE)
                bad_args("--strategy '%s': expected many, writev, single, msg_more or cork", optarg);
            break;
        }
        case 'n': o.nbufs = parse_count("--nbufs", optarg, 1, MAX_NBUFS); break;
        case 'B': o.bufsize = parse_count("--bufsize", optarg, 1, MAX_BUFSIZE); break;
        case 'P': o.repetitions = parse_count("--repetitions", optarg, 1, MAX_REQUESTS); break;
        case 'X': {
            char nbufs[32], *x = strchr(optarg, 'x');
            if (x == NULL || x == optarg || (size_t)(x - optarg) >= sizeof nbufs)
                bad_args("--shape '%s': expected N buffers x B bytes, e.g. 15x100", optarg);
            memcpy(nbufs, optarg, (size_t)(x - optarg));
            nbufs[x - optarg] = '\0';
            o.nbufs = parse_count("--shape's buffer count", nbufs, 1, MAX_NBUFS);
            o.bufsize = parse_count("--shape's buffer size", x + 1, 1, MAX_BUFSIZE);
            break;
        }
        case 'h': usage(stdout); exit(0);
        case 'D': describe();
        case ':': bad_args("%s needs a value", argv[optind - 1]);
        default: bad_args("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        bad_args("unexpected argument '%s'", argv[optind]);
    if (o.port < 0)
        bad_args("--port is required: the port the server printed after 'listening'");
    if (o.clients < 0)
        bad_args("--clients is required (1 to %ld)", MAX_CLIENTS);
    if (o.duration_s > 0 && o.requests >= 0)
        bad_args("--duration and --requests both say how long to run: give one of them");
    if (o.duration_s > 0 && o.rate_rps == 0)
        bad_args("--duration needs --rate (open loop); a closed loop runs --requests");
    if (o.requests < 0 && o.duration_s == 0)
        bad_args("--requests is required (requests per client, 0 to %ld)%s", MAX_REQUESTS,
                 o.rate_rps > 0 ? ", or --duration with --rate" : "");
    if (o.vary != VARY_NONE && (o.service == SERVICE_TOP || o.service == SERVICE_SPIN))
        bad_args("--vary draws echo/sink payload sizes; %s requests have none", service_names[o.service]);
    if (spin_given && o.service != SERVICE_SPIN)
        bad_args("--spin-us and --spin-dist declare the spin service's time per request: add --service spin");
    if (o.strategy != STRATEGY_NONE) {
        if (o.service != SERVICE_SINK)
            bad_args("--strategy writes sink uploads: add --service sink");
        if (o.nbufs < 0 || o.bufsize < 0)
            bad_args("--strategy needs --nbufs N and --bufsize B (seed 004: 15 x 100 ... 100 x 15)");
        if (o.nbufs * o.bufsize > MAX_REPETITION_BYTES)
            bad_args("--nbufs %ld x --bufsize %ld = %ld bytes per repetition, over the %ld-byte cap: "
                     "use fewer or smaller buffers", o.nbufs, o.bufsize, o.nbufs * o.bufsize,
                     MAX_REPETITION_BYTES);
        if ((double)o.repetitions * (double)(o.nbufs * o.bufsize) > (double)MAX_SIZE)
            bad_args("--repetitions %ld x %ld bytes is over the %ld-byte body cap: use fewer repetitions",
                     o.repetitions, o.nbufs * o.bufsize, MAX_SIZE);
        if (events_only || o.vary != VARY_NONE || o.engine == ENGINE_EVENTS)
            bad_args("--strategy runs blocking connections of its own: drop --engine events, --rate, "
                     "--warmup, --reconnect, --idle, --bad and --vary");
        o.size = o.repetitions * o.nbufs * o.bufsize;
    } else if (o.nbufs > 0 || o.bufsize > 0 || o.repetitions != 1) {
        bad_args("--nbufs, --bufsize and --repetitions shape the writes of --strategy: add --strategy");
    }
    if (events_only && o.engine != ENGINE_EVENTS)
        bad_args("%s needs --engine events (the threads engine is the seeds' closed-loop "
                 "client)", events_only);
    if (o.engine == ENGINE_THREADS && o.clients * o.requests > MAX_SAMPLES)
        bad_args("--clients %ld x --requests %ld = %ld latency samples, more than the %ld "
                 "this client keeps in memory: use fewer clients or requests, or "
                 "--engine events (a histogram)",
                 o.clients, o.requests, o.clients * o.requests, MAX_SAMPLES);
    if (o.duration_s > 0 && o.rate_rps * o.duration_s > (double)MAX_REQUESTS * MAX_CLIENTS)
        bad_args("--rate x --duration is too many requests: ask for fewer");
    if (arrivals_given && o.rate_rps == 0)
        bad_args("--arrivals says how an open loop spaces its requests: add --rate (and --engine events)");
    if (o.arrivals == ARRIVALS_POISSON &&
        (o.duration_s > 0 ? o.rate_rps * o.duration_s : (double)o.clients * (double)o.requests) > ARRIVALS_MAX_POISSON)
        bad_args("--arrivals poisson draws the whole schedule first, 8 bytes a request: at most %ld "
                 "requests (lower --rate or --duration)", ARRIVALS_MAX_POISSON);
    if (o.engine == ENGINE_EVENTS) {
        if (o.threads == 0)
            o.threads = cpus_allowed();
        if (o.threads > o.clients)
            o.threads = o.clients;  /* a loop with no active connection would only wait */
    } else {
        o.threads = o.clients;      /* one per connection */
    }
    return o;
}

/* ----------------------------------------------------------------- setup */

/* The CPUs this process may run on (its affinity: what labkit pinned it to). */
static long cpus_allowed(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0)
        return 1;
    long n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

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

    struct options o = parse_options(argc, argv);
    struct net_addr addr;
    if (net_resolve(o.host, (int)o.port, &addr) < 0)
        bad_args("--host '%s': not an address this machine can resolve", o.host);
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
        drive_strategy(&o, &addr, &work, &out);
    else if (o.engine == ENGINE_EVENTS)
        drive_events(&o, &addr, &work, &out);
    else
        drive_threads(&o, &addr, &work, &out);
    out.window_wall_s = (double)(now_ns() - wall_before) / 1e9;
    out.window_cpu_s = process_cpu_s() - cpu_before;
    int code = report_outcome(&o, &out);

    outcome_free(&out);
    workload_free(&work);
    return code;
}
