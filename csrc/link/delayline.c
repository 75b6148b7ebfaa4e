/* delayline.c -- a wire with a length: the lab's own delay and loss, for
 * kernels without sch_netem.
 *
 *   delayline --left IF --right IF [--delay-ms D] [--jitter-ms J]
 *             [--loss-percent P] [--seed S] [--queue-mb M]
 *
 * It runs in the middle namespace of a link (labkit/netlink/):
 *
 *   server ns: veth end =|= IF_left  [ delayline ]  IF_right =|= veth end: client ns
 *
 * Every frame that arrives on one side is held for the delay, then written
 * byte for byte to the other side: a two-port bridge with a length and a loss
 * rate.  The middle ends have no addresses; the two hosts ARP for each other
 * through it and never learn it is there.
 *
 * Why AF_PACKET on veth ends and not a pair of TUN devices: the hosts keep
 * ordinary veth ends, so tbf, TCP_INFO, `ip link` and the namespaces are the
 * same with the delay line as with netem, and the delay line needs no
 * addresses, routes or ARP of its own.
 *
 * Each choice below is something a naive forwarder gets wrong:
 *  - the sockets are promiscuous: a frame is addressed to the far host's MAC,
 *    not to the middle end's, and PACKET_IGNORE_OUTGOING keeps our own writes
 *    from coming back as input;
 *  - PACKET_VNET_HDR: veth leaves TCP checksums to "hardware" (there is
 *    none), so a frame copied without its virtio header arrives with a wrong
 *    checksum and is dropped.  With the header the note travels along, and
 *    so do 64 KiB GSO frames (one copy instead of 40).  Where a loss is asked,
 *    labkit sets gso_max_segs 1 on the hosts' ends, so frames are wire-sized
 *    and one loss drops one segment, not a 64 KiB train;
 *  - frames leave in arrival order: a jittered delay never lets a frame
 *    overtake the one before it (netem reorders under jitter; a wire does not);
 *  - loss is independent per frame (netem's plain "loss P%"); real links also
 *    lose in bursts, which this does not emulate;
 *  - the queue is bounded (--queue-mb): a frame beyond it is dropped at the
 *    tail and counted, like a router's full buffer.
 *
 * It asks for nice -10 (granted to root): on a machine with fewer cores than
 * server, client and delay line, the wire should not wait for a CPU.  How late
 * a frame left despite that is counted and reported (max_late_us).
 *
 * Prints "delayline: ready" once both sockets are open.  SIGTERM stops it; it
 * then prints one JSON line: per direction the frames forwarded, lost and
 * dropped, the deepest queue and how late the latest frame left (the timer's
 * error), and the kernel's own drops on each socket (tp_drops).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

#define MAX_FRAME (sizeof(struct virtio_net_hdr) + 65536 + 64)
#define VNET_HDR  sizeof(struct virtio_net_hdr)
#define BATCH     512  /* frames read from one side before looking at the clock again */

struct options {
    const char *left, *right;
    double delay_ms, jitter_ms, loss;  /* loss as a probability */
    uint64_t seed;
    size_t queue_bytes;
};

struct frame {
    struct frame *next;
    uint64_t release_ns;
    size_t len;                 /* virtio header included */
    unsigned char data[];
};

/* One direction: frames read from `in`, held, written to `out`. */
struct direction {
    const char *name;
    int in, out;
    struct frame *head, *tail;
    size_t queued_bytes, max_queued_bytes;
    uint64_t last_release_ns;
    unsigned long long forwarded, bytes, lost, queue_drops, send_errors;
    uint64_t max_late_ns;
    int blocked;                /* `out` said EAGAIN/ENOBUFS: wait for POLLOUT */
};

static volatile sig_atomic_t stopping;
static void on_signal(int signum) { (void)signum; stopping = 1; }

static uint64_t rng_state;
static double uniform01(void)  /* xorshift64*, [0, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
}

static int open_side(const char *ifname)
{
    unsigned index = if_nametoindex(ifname);
    if (index == 0)
        die_errno("no interface %s in this namespace", ifname);
    /* Protocol 0 until bound: an ETH_P_ALL socket would queue every frame of
     * every interface between socket() and bind(). */
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die_errno("socket(AF_PACKET) (needs CAP_NET_RAW)");
    int on = 1, size = 16 << 20;
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) < 0)
        die_errno("PACKET_VNET_HDR");
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on) < 0)
        die_errno("PACKET_IGNORE_OUTGOING (Linux 4.20 or newer)");
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    struct sockaddr_ll at = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = (int)index};
    if (bind(fd, (struct sockaddr *)&at, sizeof at) < 0)
        die_errno("bind to %s", ifname);
    struct packet_mreq promiscuous = {.mr_ifindex = (int)index, .mr_type = PACKET_MR_PROMISC};
    if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &promiscuous, sizeof promiscuous) < 0)
        die_errno("promiscuous mode on %s", ifname);
    return fd;
}

static void hold(struct direction *d, const struct options *o, const unsigned char *data, size_t len,
                 uint64_t now)
{
    if (o->loss > 0 && uniform01() < o->loss) {
        d->lost++;
        return;
    }
    if (d->queued_bytes + len > o->queue_bytes) {
        d->queue_drops++;
        return;
    }
    struct frame *f = malloc(sizeof *f + len);
    if (f == NULL) {
        d->queue_drops++;
        return;
    }
    double held_ms = o->delay_ms + (o->jitter_ms > 0 ? (2 * uniform01() - 1) * o->jitter_ms : 0);
    uint64_t release = now + (uint64_t)(held_ms > 0 ? held_ms * 1e6 : 0);
    if (release < d->last_release_ns)
        release = d->last_release_ns;  /* in order: never overtake the frame before */
    d->last_release_ns = release;
    f->next = NULL;
    f->release_ns = release;
    f->len = len;
    memcpy(f->data, data, len);
    if (d->tail)
        d->tail->next = f;
    else
        d->head = f;
    d->tail = f;
    d->queued_bytes += len;
    if (d->queued_bytes > d->max_queued_bytes)
        d->max_queued_bytes = d->queued_bytes;
}

static void receive(struct direction *d, const struct options *o)
{
    static unsigned char buf[MAX_FRAME];
    uint64_t now = now_ns();
    for (int i = 0; i < BATCH; i++) {
        ssize_t n = recv(d->in, buf, sizeof buf, MSG_TRUNC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            die_errno("read from the %s side", d->name);
        }
        if ((size_t)n > sizeof buf || (size_t)n <= VNET_HDR) {
            d->queue_drops++;  /* cannot happen below 64 KiB frames; counted if it does */
            continue;
        }
        hold(d, o, buf, (size_t)n, now);
    }
}

static void send_due(struct direction *d)
{
    while (d->head) {
        uint64_t now = now_ns();
        struct frame *f = d->head;
        if (f->release_ns > now)
            return;
        ssize_t n = send(d->out, f->data, f->len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
                d->blocked = 1;
                return;
            }
            d->send_errors++;
        } else {
            d->forwarded++;
            d->bytes += f->len - VNET_HDR;
            if (now - f->release_ns > d->max_late_ns)
                d->max_late_ns = now - f->release_ns;
        }
        d->head = f->next;
        if (d->head == NULL)
            d->tail = NULL;
        d->queued_bytes -= f->len;
        free(f);
    }
}

static unsigned long long socket_drops(int fd)
{
    struct tpacket_stats stats;
    socklen_t len = sizeof stats;
    if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &stats, &len) < 0)
        return 0;
    return stats.tp_drops;
}

static void print_direction(const struct direction *d)
{
    printf("\"%s\": {\"forwarded\": %llu, \"bytes\": %llu, \"lost\": %llu, \"queue_drops\": %llu, "
           "\"send_errors\": %llu, \"max_queued_bytes\": %zu, \"max_late_us\": %.1f}",
           d->name, d->forwarded, d->bytes, d->lost, d->queue_drops, d->send_errors, d->max_queued_bytes,
           d->max_late_ns / 1e3);
}

static void usage(const char *program)
{
    fprintf(stderr,
            "usage: %s --left IF --right IF [--delay-ms D] [--jitter-ms J] [--loss-percent P]\n"
            "          [--seed S] [--queue-mb M]\n"
            "Forwards frames between two interfaces, each held D +- J ms, lost with probability P%%.\n"
            "Prints \"delayline: ready\", then on SIGTERM one JSON line of counters.\n",
            program);
    exit(2);
}

static double parse_number(const char *name, const char *text, double least, double most)
{
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || end == text || *end || value < least || value > most)
        die("--%s %s: give a number from %g to %g", name, text, least, most);
    return value;
}

int main(int argc, char **argv)
{
    set_program_name(argv[0]);
    struct options o = {.seed = 1, .queue_bytes = 64u << 20};
    static const struct option longs[] = {
        {"left", required_argument, 0, 'l'},         {"right", required_argument, 0, 'r'},
        {"delay-ms", required_argument, 0, 'd'},     {"jitter-ms", required_argument, 0, 'j'},
        {"loss-percent", required_argument, 0, 'p'}, {"seed", required_argument, 0, 's'},
        {"queue-mb", required_argument, 0, 'q'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
        switch (c) {
        case 'l': o.left = optarg; break;
        case 'r': o.right = optarg; break;
        case 'd': o.delay_ms = parse_number("delay-ms", optarg, 0, 10000); break;
        case 'j': o.jitter_ms = parse_number("jitter-ms", optarg, 0, 10000); break;
        case 'p': o.loss = parse_number("loss-percent", optarg, 0, 100) / 100; break;
        case 's': o.seed = (uint64_t)parse_number("seed", optarg, 1, 1e15); break;
        case 'q': o.queue_bytes = (size_t)parse_number("queue-mb", optarg, 1, 4096) << 20; break;
        default: usage(argv[0]);
        }
    }
    if (o.left == NULL || o.right == NULL || optind != argc)
        usage(argv[0]);
    if (o.jitter_ms > o.delay_ms)
        die("--jitter-ms %g is more than --delay-ms %g: a frame cannot leave before it came", o.jitter_ms,
            o.delay_ms);
    rng_state = o.seed * 0x9E3779B97F4A7C15ULL | 1;

    /* Signals only inside ppoll, so a SIGTERM can never fall between the
     * check of `stopping` and the wait. */
    sigset_t blocked, during_wait;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigprocmask(SIG_BLOCK, &blocked, &during_wait);
    sigdelset(&during_wait, SIGTERM);
    sigdelset(&during_wait, SIGINT);
    struct sigaction action = {.sa_handler = on_signal};
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  /* wake on time, not up to 50 us late */
    /* A wire does not wait for the hosts' processes to yield the CPU: run before
     * them where permitted (root), as the lab's server and client run at nice 0. */
    if (setpriority(PRIO_PROCESS, 0, -10) < 0 && errno != EACCES && errno != EPERM)
        warn_errno("setpriority");

    int left = open_side(o.left), right = open_side(o.right);
    struct direction ways[2] = {
        {.name = "left_to_right", .in = left, .out = right},
        {.name = "right_to_left", .in = right, .out = left},
    };
    printf("delayline: ready\n");
    fflush(stdout);

    while (!stopping) {
        send_due(&ways[0]);
        send_due(&ways[1]);
        uint64_t next = UINT64_MAX;
        for (int i = 0; i < 2; i++)
            if (ways[i].head && !ways[i].blocked && ways[i].head->release_ns < next)
                next = ways[i].head->release_ns;
        struct pollfd fds[2] = {{.fd = left, .events = POLLIN}, {.fd = right, .events = POLLIN}};
        if (ways[1].blocked)  /* right_to_left writes to left */
            fds[0].events |= POLLOUT;
        if (ways[0].blocked)
            fds[1].events |= POLLOUT;
        struct timespec wait, *timeout = NULL;
        if (next != UINT64_MAX) {
            uint64_t now = now_ns(), left_ns = next > now ? next - now : 0;
            wait = (struct timespec){.tv_sec = (time_t)(left_ns / 1000000000u), .tv_nsec = (long)(left_ns % 1000000000u)};
            timeout = &wait;
        }
        if (ppoll(fds, 2, timeout, &during_wait) < 0) {
            if (errno == EINTR)
                continue;
            die_errno("ppoll");
        }
        if (fds[0].revents & POLLOUT)
            ways[1].blocked = 0;
        if (fds[1].revents & POLLOUT)
            ways[0].blocked = 0;
        if (fds[0].revents & (POLLIN | POLLERR))
            receive(&ways[0], &o);
        if (fds[1].revents & (POLLIN | POLLERR))
            receive(&ways[1], &o);
    }

    printf("{\"delayline\": {\"delay_ms\": %g, \"jitter_ms\": %g, \"loss_percent\": %g, ", o.delay_ms, o.jitter_ms,
           o.loss * 100);
    print_direction(&ways[0]);
    printf(", ");
    print_direction(&ways[1]);
    printf(", \"socket_drops\": {\"%s\": %llu, \"%s\": %llu}}}\n", o.left, socket_drops(left), o.right,
           socket_drops(right));
    return 0;
}
