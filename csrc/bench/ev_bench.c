/* ev_bench.c -- libevent's test/bench.c on the lab's own readiness backends.
 *
 *   ev_bench_<backend> --descriptors N [--active A] [--writes W] [--runs R]
 *
 * N sources are watched for reading; A of them are made readable at the
 * start, spread evenly.  Each time a source fires, the loop consumes it and
 * makes the next source readable, until W such writes were made: a chain of
 * events, A of them in flight at any moment.  Only the event loop is timed
 * (as in bench.c), so the figures are the cost of one ev_poll() call and of
 * one event.  select and poll hand the kernel all N descriptors on every
 * call, so their cost grows with N; epoll's kernel keeps the watched set
 * and reports only the ready ones, so its cost follows A.
 *
 * The backend is chosen at link time: one binary per csrc/loop/ev_*.c.
 *
 * A source is an eventfd, not a socketpair or pipe as in bench.c: one
 * descriptor per watched source (a pipe needs two), so 10,000 sources fit
 * in an open-file limit of 20,000, and select's FD_SETSIZE wall is reached
 * at about 1,000 sources, not 500.  EFD_SEMAPHORE: each write adds one
 * event and each read takes one, so two chains meeting on one source lose
 * nothing.
 *
 * stdout: one JSON object: the medians over the runs, and each run's time per
 * poll call (ns_per_poll_runs; median() sorts in place, so in ascending order).  Exit 0, 2 for bad arguments or an open-file
 * limit too low, 3 when this backend cannot watch that many descriptors
 * (select above FD_SETSIZE: a clear refusal, not memory corruption).
 */
#include "common/util.h"
#include "loop/ev.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define EXIT_BAD_ARGS 2
#define EXIT_TOO_MANY 3
#define MAX_DESCRIPTORS 1000000L
#define FD_RESERVE 16 /* stdio, the epoll descriptor, sanitizers */

struct bench {
    ev_t *ev;
    ev_fired_t *fired;
    int *source_fd;     /* source i -> its eventfd */
    long *source_of_fd; /* eventfd -> its source index */
    long sources, active, writes;
};

struct run {
    uint64_t elapsed_ns;
    long polls, events;
};

static void usage(FILE *to)
{
    fprintf(to,
        "usage: %s --descriptors N [--active A] [--writes W] [--runs R]\n"
        "  --descriptors N  event sources watched (eventfds), 1..%ld\n"
        "  --active A       sources readable at any moment (default 1)\n"
        "  --writes W       events chained per run (default 1000)\n"
        "  --runs R         timed runs; the median is reported (default 5)\n"
        "Prints one JSON object. Exit 3: the backend cannot watch N descriptors.\n",
        ev_name(), MAX_DESCRIPTORS);
}

static long option(const char *flag, const char *text, long min, long max)
{
    long v;
    if (parse_long(text, min, max, &v) < 0) {
        warn("%s '%s': expected a whole number from %ld to %ld", flag, text, min, max);
        exit(EXIT_BAD_ARGS);
    }
    return v;
}

static void make_readable(const struct bench *b, long source)
{
    uint64_t one = 1;
    if (write_full(b->source_fd[source], &one, sizeof one) != sizeof one)
        die_errno("write to eventfd %d", b->source_fd[source]);
}

static void consume(int fd)
{
    uint64_t value;
    if (read_full(fd, &value, sizeof value) != sizeof value)
        die_errno("read from eventfd %d", fd);
}

/* One chain of b->writes events, timed from the first ev_poll to the last. */
static struct run run_once(const struct bench *b)
{
    long space = b->sources / b->active;
    long in_flight = 0, handled = 0, writes_left = b->writes;
    for (long i = 0; i < b->active; i++, in_flight++)
        make_readable(b, i * space);

    struct run r = { 0, 0, 0 };
    uint64_t start = now_ns();
    while (handled < in_flight) {
        int n = ev_poll(b->ev, 1000, b->fired);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die_errno("%s: poll", ev_name());
        if (n == 0)
            die("%s: no event within 1 s although %ld are pending", ev_name(), in_flight - handled);
        r.polls++;
        for (int i = 0; i < n; i++) {
            long source = b->source_of_fd[b->fired[i].fd];
            consume(b->fired[i].fd);
            handled++;
            if (writes_left > 0) {
                make_readable(b, (source + 1) % b->sources);
                writes_left--;
                in_flight++;
            }
        }
    }
    r.elapsed_ns = now_ns() - start;
    r.events = handled;
    return r;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    set_program_name(argv[0]);
    long sources = -1, active = 1, writes = 1000, runs = 5;
    static const struct option longopts[] = {
        { "descriptors", required_argument, NULL, 'n' },
        { "active", required_argument, NULL, 'a' },
        { "writes", required_argument, NULL, 'w' },
        { "runs", required_argument, NULL, 'r' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        switch (c) {
        case 'n': sources = option("--descriptors", optarg, 1, MAX_DESCRIPTORS); break;
        case 'a': active = option("--active", optarg, 1, MAX_DESCRIPTORS); break;
        case 'w': writes = option("--writes", optarg, 0, 100000000L); break;
        case 'r': runs = option("--runs", optarg, 1, 1000); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_BAD_ARGS;
        }
    }
    if (sources < 0 || optind != argc) {
        usage(stderr);
        return EXIT_BAD_ARGS;
    }
    if (active > sources) {
        warn("--active %ld is more than --descriptors %ld", active, sources);
        return EXIT_BAD_ARGS;
    }
    long want_fds = sources + FD_RESERVE;
    long limit = set_fd_limit(want_fds);
    if (limit < want_fds) {
        warn("%ld descriptors need an open-file limit of about %ld, but it is %ld "
             "(raise it with `ulimit -n`, or use fewer descriptors)", sources, want_fds, limit);
        return EXIT_BAD_ARGS;
    }

    struct bench b = { .sources = sources, .active = active, .writes = writes };
    int setsize = (int)want_fds;
    b.ev = ev_create(setsize);
    b.fired = calloc((size_t)setsize, sizeof *b.fired);
    b.source_fd = calloc((size_t)sources, sizeof *b.source_fd);
    b.source_of_fd = calloc((size_t)setsize, sizeof *b.source_of_fd);
    if (b.ev == NULL || b.fired == NULL || b.source_fd == NULL || b.source_of_fd == NULL)
        die_errno("%s: setting up %ld sources", ev_name(), sources);
    for (long i = 0; i < sources; i++) {
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
        if (fd < 0)
            die_errno("eventfd number %ld", i + 1);
        if (fd >= setsize)
            die("eventfd %d is beyond the %d descriptors planned for", fd, setsize);
        if (ev_add(b.ev, fd, EV_READABLE) < 0) {
            if (errno != ERANGE)
                die_errno("%s: watching descriptor %d", ev_name(), fd);
            warn("%s can watch descriptors below %d only; %ld sources reach descriptor %d "
                 "or beyond: refused (use poll or epoll for this many)",
                 ev_name(), ev_limit(b.ev), sources, fd);
            return EXIT_TOO_MANY;
        }
        b.source_fd[i] = fd;
        b.source_of_fd[fd] = i;
    }

    run_once(&b); /* warm-up: caches, page faults, the kernel's wait queues */
    double *per_poll = calloc((size_t)runs, sizeof *per_poll);
    double *per_event = calloc((size_t)runs, sizeof *per_event);
    if (per_poll == NULL || per_event == NULL)
        die_errno("calloc");
    long polls = 0, events = 0;
    for (long i = 0; i < runs; i++) {
        struct run r = run_once(&b);
        per_poll[i] = (double)r.elapsed_ns / (double)r.polls;
        per_event[i] = (double)r.elapsed_ns / (double)r.events;
        polls += r.polls;
        events += r.events;
    }
    double events_per_poll = (double)events / (double)polls;
    printf("{\"backend\":\"%s\",\"descriptors\":%ld,\"active\":%ld,\"writes\":%ld,\"runs\":%ld,"
           "\"polls\":%ld,\"events\":%ld,\"events_per_poll\":%.3f,"
           "\"ns_per_poll\":%.1f,\"ns_per_event\":%.1f,\"ns_per_poll_runs\":[",
           ev_name(), sources, active, writes, runs, polls, events, events_per_poll,
           median(per_poll, runs), median(per_event, runs));
    for (long i = 0; i < runs; i++)  /* each run's own: how sure the median is (labkit.uncertainty) */
        printf("%s%.1f", i ? "," : "", per_poll[i]);
    printf("]}\n");

    for (long i = 0; i < sources; i++)
        close(b.source_fd[i]);
    ev_free(b.ev);
    free(b.fired);
    free(b.source_fd);
    free(b.source_of_fd);
    free(per_poll);
    free(per_event);
    return 0;
}
