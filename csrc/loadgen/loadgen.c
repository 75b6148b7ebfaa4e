/* loadgen.c -- the lab's load generator.
 *
 *   loadgen --port P [--host 127.0.0.1] --clients N --requests R
 *           [--service top|echo|sink] [--k K] [--size BYTES]
 *           [--timeout S] [--connect-timeout S]
 *
 * N clients (one thread each, like the seed reports' client) connect, wait
 * at a start gate until every one of them is connected (or has failed to),
 * then each does R request/reply exchanges and closes.  The gate is what
 * makes "N concurrent clients" true: it is what shows an iterative server
 * serving them one after the other.
 *
 * stdout gets exactly one JSON object (counts, elapsed time, latency
 * percentiles, failures by name, the client's own getrusage); human
 * messages go to stderr.  Exit 0 if every connection and request succeeded,
 * 1 if some failed, 2 for bad arguments or a client count that cannot fit.
 *
 * The file reads top to bottom as:
 *   options -> failure names -> one exchange (bytes only, no I/O) ->
 *   one connection (poll-bounded I/O) -> the threaded driver -> report.
 * The exchange knows nothing about sockets, so an event-driven driver can
 * reuse it unchanged.
 */
#include "common/net.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define EXIT_BAD_ARGS 2
#define MAX_CLIENTS 100000L
#define MAX_REQUESTS 10000000L
#define MAX_SAMPLES 20000000L          /* N x R latencies kept: 160 MB at most */
#define MAX_SIZE (256L * 1024 * 1024)  /* echo/sink payload per request */
#define MAX_REPLY_LINE 1024            /* LAB.md: a line over 1 KiB is malformed */
#define FD_RESERVE 16                  /* descriptors libc/sanitizers may open */
#define THREAD_STACK (256 * 1024)      /* 100k threads x 8 MiB default is too much */

/* ------------------------------------------------------------------ options */

enum service { SERVICE_TOP, SERVICE_ECHO, SERVICE_SINK };
static const char *const service_names[] = { "top", "echo", "sink" };

struct options {
    const char *host;
    long port;
    long clients;
    long requests;
    enum service service;
    long k;
    long size;
    double timeout_s;
    double connect_timeout_s;
};

static void usage(FILE *to)
{
    fprintf(to,
        "usage: loadgen --port P --clients N --requests R [options]\n"
        "  --host H               server address (default 127.0.0.1; ::1 works)\n"
        "  --service top|echo|sink  workload (default top)\n"
        "  --k K                  top: processes per reply, 1..1000 (default 2)\n"
        "  --size BYTES           echo/sink: payload per request (default 64)\n"
        "  --timeout S            bound on each exchange, seconds (default 10);\n"
        "                         behind an iterative server a client waits for\n"
        "                         all earlier clients, so raise it for big sweeps\n"
        "  --connect-timeout S    bound on each connect, seconds (default 5)\n"
        "Prints one JSON object on stdout. Exit 0: all succeeded, 1: some\n"
        "failed, 2: bad arguments.\n");
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

static double parse_seconds(const char *flag, const char *text)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !(v > 0 && v <= 3600))
        bad_args("%s '%s': expected seconds, more than 0 and at most 3600", flag, text);
    return v;
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
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    struct options o = {
        .host = "127.0.0.1", .port = -1, .clients = -1, .requests = -1,
        .service = SERVICE_TOP, .k = 2, .size = 64,
        .timeout_s = 10, .connect_timeout_s = 5,
    };
    int opt;

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
            else bad_args("--service '%s': expected top, echo or sink", optarg);
            break;
        case 'h': usage(stdout); exit(0);
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
    if (o.requests < 0)
        bad_args("--requests is required (requests per client, 0 to %ld)", MAX_REQUESTS);
    if (o.clients * o.requests > MAX_SAMPLES)
        bad_args("--clients %ld x --requests %ld = %ld latency samples, more than the %ld "
                 "this client keeps in memory: use fewer clients or requests",
                 o.clients, o.requests, o.clients * o.requests, MAX_SAMPLES);
    return o;
}

/* ---------------------------------------------------------- failure names */

/* A failure is an errno value (> 0) or one of the protocol failures below,
 * which have names of their own in the report. */
enum { FAIL_EOF = -1, FAIL_BADREPLY = -2 };

static const char *failure_name(int failure, char buf[32])
{
    if (failure == FAIL_EOF)
        return "EOF";       /* the server closed before the reply was complete */
    if (failure == FAIL_BADREPLY)
        return "BADREPLY";  /* ERR, malformed or unexpected reply */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    const char *name = strerrorname_np(failure);
    if (name)
        return name;
#else
    static const struct { int err; const char *name; } known[] = {
#define E(x) { x, #x }
        E(ECONNREFUSED), E(ECONNRESET), E(ECONNABORTED), E(ETIMEDOUT), E(EPIPE),
        E(EMFILE), E(ENFILE), E(EAGAIN), E(ENOMEM), E(ENOBUFS), E(EADDRNOTAVAIL),
        E(EADDRINUSE), E(ENETUNREACH), E(EHOSTUNREACH), E(EINVAL),
#undef E
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].err == failure)
            return known[i].name;
#endif
    snprintf(buf, 32, "errno_%d", failure);
    return buf;
}

/* Failures by kind, shared by all client threads (failures are rare, so
 * one lock is plenty). */
#define MAX_FAILURE_KINDS 64
struct failure_tally {
    pthread_mutex_t lock;
    int kinds;
    struct { int failure; long count; } entry[MAX_FAILURE_KINDS];
};

static void tally_add(struct failure_tally *t, int failure)
{
    pthread_mutex_lock(&t->lock);
    int i = 0;
    while (i < t->kinds && t->entry[i].failure != failure)
        i++;
    if (i == t->kinds && t->kinds < MAX_FAILURE_KINDS)
        t->entry[t->kinds++].failure = failure;
    if (i < t->kinds)
        t->entry[i].count++;
    pthread_mutex_unlock(&t->lock);
}

/* ------------------------------------------- one exchange, as bytes only */

/* What every exchange of this run sends; read-only, shared by all clients. */
struct workload {
    enum service service;
    long k;
    size_t size;
    char head[32];                 /* "TOP k\n" or "PUT size\n"; empty for echo */
    size_t head_len;
    unsigned char *payload;        /* echo/sink body, `size` bytes */
    size_t body_len;               /* 0 for top */
};

enum reply_status { REPLY_MORE, REPLY_DONE, REPLY_BAD };

/* One request/reply exchange: which request bytes are still to be sent,
 * and the reply parsed so far.  No I/O here. */
struct exchange {
    const struct workload *w;
    size_t sent;                   /* request bytes sent (head, then body) */
    size_t echoed;                 /* echo: reply bytes checked */
    char line[MAX_REPLY_LINE + 1]; /* top/sink: the reply line being read */
    size_t line_len;
    long lines;                    /* top: process lines so far */
    unsigned long long last_ticks; /* top: utime+stime of the previous line */
    long server_reads;             /* sink: the reads the server reported */
    const char *why;               /* what was wrong with a bad reply */
    const char *bad_line;          /* and the reply line it was in, if any */
};

static void exchange_start(struct exchange *x, const struct workload *w)
{
    x->w = w;
    x->sent = 0;
    x->echoed = 0;
    x->line_len = 0;
    x->lines = 0;
    x->last_ticks = ULLONG_MAX;
    x->server_reads = 0;
    x->why = NULL;
    x->bad_line = NULL;
}

/* The request bytes not yet sent, as up to two pieces; returns how many. */
static int exchange_unsent(const struct exchange *x, struct iovec iov[2])
{
    const struct workload *w = x->w;
    int n = 0;
    if (x->sent < w->head_len)
        iov[n++] = (struct iovec){ (char *)w->head + x->sent, w->head_len - x->sent };
    size_t body_sent = x->sent > w->head_len ? x->sent - w->head_len : 0;
    if (body_sent < w->body_len)
        iov[n++] = (struct iovec){ w->payload + body_sent, w->body_len - body_sent };
    return n;
}

static void exchange_did_send(struct exchange *x, size_t n)
{
    x->sent += n;
}

static enum reply_status bad(struct exchange *x, const char *why)
{
    x->why = why;
    return REPLY_BAD;
}

/* Read an unsigned decimal that must be followed by `end`; advances *p. */
static bool take_number(const char **p, char end, unsigned long long *out)
{
    const char *s = *p;
    unsigned long long v = 0;
    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (ULLONG_MAX - 9) / 10)
            return false;
        v = v * 10 + (unsigned)(*s - '0');
    }
    if (*s != end)
        return false;
    *out = v;
    *p = s + (end != '\0');
    return true;
}

/* top: "<pid> <utime> <stime> <name>", highest utime+stime first, or "END". */
static enum reply_status top_line(struct exchange *x, const char *line)
{
    unsigned long long pid, utime, stime;
    if (strcmp(line, "END") == 0) {
        if (x->lines == 0)
            return bad(x, "END before any process line");
        return REPLY_DONE;
    }
    if (strncmp(line, "ERR", 3) == 0)
        return bad(x, "the server answered ERR");
    const char *p = line;
    if (!take_number(&p, ' ', &pid) || pid == 0 || !take_number(&p, ' ', &utime) ||
        !take_number(&p, ' ', &stime))
        return bad(x, "a process line is not '<pid> <utime> <stime> <name>'");
    if (*p == '\0')
        return bad(x, "a process line has an empty name");
    for (; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            return bad(x, "a process name has a non-printable byte");
    if (++x->lines > x->w->k)
        return bad(x, "more process lines than the k asked for");
    if (utime + stime > x->last_ticks)
        return bad(x, "process lines are not sorted by utime+stime, highest first");
    x->last_ticks = utime + stime;
    return REPLY_MORE;
}

/* sink: "OK <size> <reads>", reads between 1 and size. */
static enum reply_status sink_line(struct exchange *x, const char *line)
{
    unsigned long long n, reads;
    const char *p = line + 3;
    if (strncmp(line, "ERR", 3) == 0)
        return bad(x, "the server answered ERR");
    if (strncmp(line, "OK ", 3) != 0 || !take_number(&p, ' ', &n) ||
        !take_number(&p, '\0', &reads))
        return bad(x, "the reply is not 'OK <n> <reads>'");
    if (n != x->w->size)
        return bad(x, "OK names a size other than the one sent");
    if (reads < 1 || reads > n)
        return bad(x, "OK reports a read count outside 1..n");
    x->server_reads = (long)reads;
    return REPLY_DONE;
}

/* Feed reply bytes.  Bytes after a complete reply are a protocol error:
 * the server spoke out of turn. */
static enum reply_status exchange_received(struct exchange *x, const char *data, size_t n)
{
    const struct workload *w = x->w;
    if (w->service == SERVICE_ECHO) {
        if (x->echoed + n > w->size)
            return bad(x, "more bytes echoed than were sent");
        if (memcmp(data, w->payload + x->echoed, n) != 0)
            return bad(x, "the echoed bytes differ from the bytes sent");
        x->echoed += n;
        return x->echoed == w->size ? REPLY_DONE : REPLY_MORE;
    }
    for (size_t i = 0; i < n; i++) {
        if (data[i] != '\n') {
            if (x->line_len == MAX_REPLY_LINE)
                return bad(x, "a reply line is longer than 1 KiB");
            x->line[x->line_len++] = data[i];
            continue;
        }
        x->line[x->line_len] = '\0';
        x->line_len = 0;
        enum reply_status st = w->service == SERVICE_TOP ? top_line(x, x->line)
                                                         : sink_line(x, x->line);
        if (st == REPLY_BAD)
            x->bad_line = x->line;
        if (st == REPLY_DONE && i + 1 < n)
            return bad(x, "bytes after the end of the reply");
        if (st != REPLY_MORE)
            return st;
    }
    return REPLY_MORE;
}

/* ------------------------------------ one connection, every wait bounded */

/* Milliseconds left until `deadline_ns` (0 once it has passed). */
static int ms_left(uint64_t deadline_ns)
{
    uint64_t now = now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* poll() one descriptor until the deadline, through EINTR.
 * Returns the revents, 0 on timeout, -1 on error. */
static int wait_for(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = { .fd = fd, .events = events };
        int r = poll(&p, 1, ms_left(deadline_ns));
        if (r > 0)
            return p.revents;
        if (r == 0 && now_ns() >= deadline_ns)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

/* Connect within the timeout.  Returns 0 and *fd, or a failure. */
static int conn_open(const struct net_addr *addr, uint64_t timeout_ns, int *fd)
{
    uint64_t deadline = now_ns() + timeout_ns;
    int s = net_connect_addr(addr, true);
    if (s < 0)
        return errno;
    int failure = 0;
    int ready = wait_for(s, POLLOUT, deadline);
    if (ready == 0)
        failure = ETIMEDOUT;
    else if (ready < 0 || net_connect_result(s) < 0 || net_set_nodelay(s, true) < 0)
        failure = errno;
    if (failure) {
        close(s);
        return failure;
    }
    *fd = s;
    return 0;
}

/* Run one exchange on a non-blocking socket: send what is unsent while
 * reading whatever has arrived (an echo of a large payload would deadlock
 * if we sent it all before reading).  Returns 0 or a failure. */
static int conn_exchange(int fd, struct exchange *x, uint64_t timeout_ns)
{
    uint64_t deadline = now_ns() + timeout_ns;
    char buf[16384];

    for (;;) {
        struct iovec iov[2];
        int pieces = exchange_unsent(x, iov);
        int ready = wait_for(fd, (short)(POLLIN | (pieces ? POLLOUT : 0)), deadline);
        if (ready == 0)
            return ETIMEDOUT;
        if (ready < 0)
            return errno;

        /* Read first: an ERR reply explains a failure better than the
         * EPIPE that sending into the closed connection would give. */
        if (ready & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (got == 0)
                return FAIL_EOF;
            if (got < 0 && errno != EAGAIN && errno != EINTR)
                return errno;
            if (got > 0) {
                enum reply_status st = exchange_received(x, buf, (size_t)got);
                if (st == REPLY_BAD)
                    return FAIL_BADREPLY;
                if (st == REPLY_DONE) /* a reply before the whole request: out of turn */
                    return exchange_unsent(x, iov) ? FAIL_BADREPLY : 0;
            }
        }
        if (pieces && (ready & (POLLOUT | POLLERR))) {
            struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)pieces };
            ssize_t put = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (put >= 0)
                exchange_did_send(x, (size_t)put);
            else if (errno != EAGAIN && errno != EINTR)
                return errno;
        }
    }
}

/* ------------------------------------------------- the threaded driver */

/* A start gate: opens once every client has arrived.  A client whose
 * connect failed arrives without waiting, so it cannot hold the others
 * hostage; each arrival is bounded by the connect timeout. */
struct start_gate {
    pthread_mutex_t lock;
    pthread_cond_t opened;
    long expected, arrived;
};

static void gate_arrive(struct start_gate *g, bool wait)
{
    pthread_mutex_lock(&g->lock);
    if (++g->arrived == g->expected)
        pthread_cond_broadcast(&g->opened);
    while (wait && g->arrived < g->expected)
        pthread_cond_wait(&g->opened, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

struct run {
    struct options opt;
    struct net_addr addr;
    struct workload work;
    struct start_gate gate;
    struct failure_tally failures;
    atomic_bool bad_reply_reported;
    uint64_t *latency_ns;          /* clients x requests, client-major */
};

struct client {
    struct run *run;
    long index;
    pthread_t thread;
    bool started, connected;
    long requests_ok;
    long server_reads;             /* sink: summed over its exchanges */
    uint64_t began_ns, ended_ns;   /* first connect attempt .. closed */
};

static void report_bad_reply(struct run *run, long client, const struct exchange *x)
{
    if (!atomic_exchange(&run->bad_reply_reported, true))
        warn("client %ld: bad reply: %s%s%.200s%s (further bad replies are only counted)",
             client, x->why, x->bad_line ? ": '" : "", x->bad_line ? x->bad_line : "",
             x->bad_line ? "'" : "");
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    struct run *run = c->run;
    uint64_t *latency = run->latency_ns + c->index * run->opt.requests;
    struct exchange x;
    int fd = -1;

    c->began_ns = now_ns();
    int failure = conn_open(&run->addr, (uint64_t)(run->opt.connect_timeout_s * 1e9), &fd);
    gate_arrive(&run->gate, failure == 0);
    c->connected = failure == 0;

    for (long i = 0; failure == 0 && i < run->opt.requests; i++) {
        exchange_start(&x, &run->work);
        uint64_t t0 = now_ns();
        failure = conn_exchange(fd, &x, (uint64_t)(run->opt.timeout_s * 1e9));
        if (failure == 0) {
            latency[c->requests_ok++] = now_ns() - t0;
            c->server_reads += x.server_reads;
        } else if (failure == FAIL_BADREPLY) {
            report_bad_reply(run, c->index, &x);
        }
    }
    if (failure)
        tally_add(&run->failures, failure);
    if (fd >= 0)
        close(fd);
    c->ended_ns = now_ns();
    return NULL;
}

static void run_clients(struct run *run, struct client *clients)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (long i = 0; i < run->opt.clients; i++) {
        struct client *c = &clients[i];
        *c = (struct client){ .run = run, .index = i };
        int err = pthread_create(&c->thread, &attr, client_main, c);
        c->started = err == 0;
        if (!c->started) {
            /* No thread for this client: count it as a failed connect. */
            c->began_ns = c->ended_ns = now_ns();
            tally_add(&run->failures, err);
            gate_arrive(&run->gate, false);
        }
    }
    pthread_attr_destroy(&attr);
    for (long i = 0; i < run->opt.clients; i++)
        if (clients[i].started)
            pthread_join(clients[i].thread, NULL);
}

/* ------------------------------------------------------------ the report */

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples, in microseconds. */
static double percentile_us(const uint64_t *sorted, size_t n, double p)
{
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    return (double)sorted[rank - 1] / 1e3;
}

/* Gather every client's samples at the front of the array and sort them. */
static size_t collect_samples(struct run *run, const struct client *clients)
{
    size_t n = 0;
    for (long i = 0; i < run->opt.clients; i++) {
        const uint64_t *mine = run->latency_ns + i * run->opt.requests;
        memmove(run->latency_ns + n, mine, (size_t)clients[i].requests_ok * sizeof *mine);
        n += (size_t)clients[i].requests_ok;
    }
    qsort(run->latency_ns, n, sizeof *run->latency_ns, compare_u64);
    return n;
}

static void print_latency(const uint64_t *sorted, size_t n)
{
    if (n == 0) {
        printf("\"latency_us\":{\"p50\":null,\"p90\":null,\"p99\":null,\"p999\":null,"
               "\"max\":null,\"mean\":null,\"samples\":0}");
        return;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)sorted[i];
    printf("\"latency_us\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
           "\"max\":%.3f,\"mean\":%.3f,\"samples\":%zu}",
           percentile_us(sorted, n, 50), percentile_us(sorted, n, 90),
           percentile_us(sorted, n, 99), percentile_us(sorted, n, 99.9),
           (double)sorted[n - 1] / 1e3, sum / (double)n / 1e3, n);
}

static void print_errors(const struct failure_tally *t)
{
    printf("\"errors\":{");
    for (int i = 0; i < t->kinds; i++) {
        char buf[32];
        printf("%s\"%s\":%ld", i ? "," : "", failure_name(t->entry[i].failure, buf),
               t->entry[i].count);
    }
    printf("}");
}

static void print_rusage(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("\"rusage\":{\"user_s\":%.6f,\"sys_s\":%.6f,\"voluntary_ctxt_switches\":%ld,"
           "\"involuntary_ctxt_switches\":%ld,\"minor_faults\":%ld,\"major_faults\":%ld,"
           "\"max_rss_kb\":%ld}",
           (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6,
           ru.ru_nvcsw, ru.ru_nivcsw, ru.ru_minflt, ru.ru_majflt, ru.ru_maxrss);
}

/* Prints the JSON summary; returns the exit code. */
static int report(struct run *run, const struct client *clients)
{
    const struct options *o = &run->opt;
    long connected = 0, requests_ok = 0, server_reads = 0;
    uint64_t began = UINT64_MAX, ended = 0;
    for (long i = 0; i < o->clients; i++) {
        connected += clients[i].connected;
        requests_ok += clients[i].requests_ok;
        server_reads += clients[i].server_reads;
        if (clients[i].began_ns < began) began = clients[i].began_ns;
        if (clients[i].ended_ns > ended) ended = clients[i].ended_ns;
    }
    /* A client that fails stops: its unsent requests count as failed too,
     * so ok + failed is always clients x requests. */
    long requests_failed = o->clients * o->requests - requests_ok;
    double elapsed = (double)(ended - began) / 1e9;
    size_t samples = collect_samples(run, clients);

    printf("{\"service\":\"%s\",\"host\":\"%s\",\"port\":%ld,", service_names[o->service],
           o->host, o->port);
    printf("\"clients\":%ld,\"requests_per_client\":%ld,", o->clients, o->requests);
    if (o->service == SERVICE_TOP)
        printf("\"k\":%ld,\"size_bytes\":null,", o->k);
    else
        printf("\"k\":null,\"size_bytes\":%ld,", o->size);
    printf("\"timeout_s\":%g,\"connect_timeout_s\":%g,", o->timeout_s, o->connect_timeout_s);
    printf("\"connections_ok\":%ld,\"connections_failed\":%ld,", connected,
           o->clients - connected);
    printf("\"requests_ok\":%ld,\"requests_failed\":%ld,", requests_ok, requests_failed);
    printf("\"elapsed_s\":%.6f,", elapsed);
    if (elapsed > 0)
        printf("\"throughput_rps\":%.3f,", (double)requests_ok / elapsed);
    else
        printf("\"throughput_rps\":null,");
    if (o->service == SERVICE_SINK && requests_ok > 0)
        printf("\"sink_server_reads_mean\":%.3f,", (double)server_reads / (double)requests_ok);
    print_latency(run->latency_ns, samples);
    putchar(',');
    print_errors(&run->failures);
    putchar(',');
    print_rusage();
    printf("}\n");
    fflush(stdout);

    warn("%ld clients x %ld requests (%s): %ld ok, %ld failed, %ld connections failed, "
         "%.3f s", o->clients, o->requests, service_names[o->service], requests_ok,
         requests_failed, o->clients - connected, elapsed);
    return requests_failed == 0 && connected == o->clients ? 0 : 1;
}

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

/* One descriptor per client must fit under RLIMIT_NOFILE.  Raise the soft
 * limit as far as the hard limit allows; if that is not enough, refuse
 * with the number that fits. */
static void ensure_descriptors(long clients)
{
    struct rlimit lim;
    long in_use = open_descriptors() + FD_RESERVE;
    long need = clients + in_use;
    if (getrlimit(RLIMIT_NOFILE, &lim) < 0)
        die_errno("getrlimit(RLIMIT_NOFILE)");
    if (lim.rlim_cur != RLIM_INFINITY && (long)lim.rlim_cur < need) {
        long now = set_fd_limit(need);
        if (now < 0)
            now = (long)lim.rlim_cur;
        if (now < need) {
            long fit = now > in_use ? now - in_use : 0;
            warn("--clients %ld needs %ld open files, but the limit is %ld "
                 "(hard limit %ld): at most %ld clients fit.", clients, need, now,
                 lim.rlim_max == RLIM_INFINITY ? -1L : (long)lim.rlim_max, fit);
            warn("ask for --clients %ld or fewer, or raise the limit first "
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

static void make_workload(struct workload *w, const struct options *o)
{
    w->service = o->service;
    w->k = o->k;
    w->size = (size_t)o->size;
    w->payload = NULL;
    w->body_len = 0;
    if (o->service == SERVICE_TOP) {
        w->head_len = (size_t)snprintf(w->head, sizeof w->head, "TOP %ld\n", o->k);
        return;
    }
    w->head_len = o->service == SERVICE_SINK
        ? (size_t)snprintf(w->head, sizeof w->head, "PUT %ld\n", o->size) : 0;
    w->payload = malloc(w->size);
    if (!w->payload)
        die("cannot allocate a %zu-byte payload: ask for a smaller --size", w->size);
    /* Varied bytes (xorshift), so a misordered echo cannot pass. */
    uint32_t state = 2463534242u;
    for (size_t i = 0; i < w->size; i++) {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        w->payload[i] = (unsigned char)state;
    }
    w->body_len = w->size;
}

int main(int argc, char **argv)
{
    set_program_name(argv[0]);
    die_with_parent();
    if (ignore_sigpipe() < 0)
        die_errno("ignoring SIGPIPE");

    static struct run run;
    run.opt = parse_options(argc, argv);
    if (net_resolve(run.opt.host, (int)run.opt.port, &run.addr) < 0)
        bad_args("--host '%s': not an address this machine can resolve", run.opt.host);
    ensure_descriptors(run.opt.clients);
    make_workload(&run.work, &run.opt);

    pthread_mutex_init(&run.gate.lock, NULL);
    pthread_cond_init(&run.gate.opened, NULL);
    run.gate.expected = run.opt.clients;
    pthread_mutex_init(&run.failures.lock, NULL);
    size_t samples = (size_t)(run.opt.clients * run.opt.requests);
    run.latency_ns = malloc((samples ? samples : 1) * sizeof *run.latency_ns);
    struct client *clients = calloc((size_t)run.opt.clients, sizeof *clients);
    if (!run.latency_ns || !clients)
        die("out of memory for %ld clients x %ld requests", run.opt.clients,
            run.opt.requests);

    run_clients(&run, clients);
    int code = report(&run, clients);

    free(clients);
    free(run.latency_ns);
    free(run.work.payload);
    return code;
}
