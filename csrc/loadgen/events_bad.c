/* events_bad.c -- --bad N: connections that misbehave from the gate until the
 * active ones are done, then are closed like the idle ones; counted apart
 * (report.c "bad"), they never fail the run.  silent writes requests back to
 * back and never reads; slow reads at most BAD_SLOW_READ bytes every
 * --bad-interval; drip writes one byte every --bad-interval (Slowloris).
 * They listen for EPOLLRDHUP, so a server that closes or resets them is seen
 * all the same (docs/loadgen-events.md).
 */
#include "loadgen/events.h"

#include "common/net.h"
#include "common/util.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BAD_IOV 64                    /* silent/slow: request units per sendmsg, at most ... */
#define BAD_CHUNK (256 * 1024)        /* ... and bytes */

const char *const events_bad_kind_names[] = { "silent", "slow", "drip" };

/* Write as much of the endless request stream as the socket takes now. */
static void bad_write(struct driver *d, struct conn *c)
{
    struct exchange *x = &c->x;
    size_t unit = x->head_len + x->body_len, total = 0;
    struct iovec iov[BAD_IOV];
    int n = exchange_unsent(x, iov);
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    while (n + 2 <= BAD_IOV && total < BAD_CHUNK) {
        if (x->head_len)
            iov[n++] = (struct iovec){ x->head, x->head_len };
        if (x->body_len)
            iov[n++] = (struct iovec){ x->w->payload, x->body_len };
        total += unit;
    }
    struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)n };
    ssize_t put = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (put < 0) {
        if (errno != EAGAIN && errno != EINTR)
            events_close(d, c, errno);
        return;
    }
    d->out->bad_bytes_sent += put;
    x->sent = (x->sent + (size_t)put) % unit;
}

/* Read at most `most` bytes; false if the connection was closed. */
static bool bad_read(struct driver *d, struct conn *c, size_t most)
{
    ssize_t got = recv(c->fd, d->buf, most, MSG_DONTWAIT);
    if (got > 0) {
        d->out->bad_bytes_received += got;
        return true;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
    events_close(d, c, got == 0 ? FAIL_EOF : errno);
    return false;
}

/* drip: the next byte of the request stream. */
static void bad_drip(struct driver *d, struct conn *c)
{
    struct exchange *x = &c->x;
    size_t unit = x->head_len + x->body_len, at = x->sent;
    char byte = at < x->head_len ? x->head[at] : (char)x->w->payload[at - x->head_len];
    ssize_t put = send(c->fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (put == 1) {
        d->out->bad_bytes_sent++;
        x->sent = (at + 1) % unit;
    } else if (put < 0 && errno != EAGAIN && errno != EINTR) {
        events_close(d, c, errno);
    }
}

/* The gate opened: every bad connection of this thread starts misbehaving. */
void events_bad_start(struct driver *d)
{
    for (long i = d->held; i < d->total; i++) {
        struct conn *c = &d->conns[i];
        if (c->phase != CONN_HELD)
            continue;
        c->phase = CONN_MISBEHAVING;
        exchange_start(&c->x, d->w, c->id, 0);
        if (d->o->bad_kind == BAD_DRIP) {
            events_set_interest(d, c, EPOLLIN | EPOLLRDHUP);
        } else {
            events_set_interest(d, c, EPOLLOUT | EPOLLRDHUP);
            bad_write(d, c);
        }
    }
    if (d->o->bad_kind != BAD_SILENT && d->total > d->held)
        d->next_bad_tick = d->start_ns;
}

/* Every --bad-interval: slow ones read a little, drip ones send a byte. */
void events_bad_tick(struct driver *d, uint64_t now)
{
    for (long i = d->held; i < d->total; i++) {
        struct conn *c = &d->conns[i];
        if (c->phase != CONN_MISBEHAVING)
            continue;
        if (d->o->bad_kind == BAD_SLOW)
            bad_read(d, c, BAD_SLOW_READ);
        else
            bad_drip(d, c);
    }
    /* On the grid start + k x interval; a late tick is not made up for. */
    uint64_t interval = (uint64_t)(d->o->bad_interval_s * 1e9);
    d->next_bad_tick = d->start_ns + ((now - d->start_ns) / interval + 1) * interval;
}

void events_bad_event(struct driver *d, struct conn *c, uint32_t events)
{
    if (c->phase == CONN_MISBEHAVING && d->o->bad_kind == BAD_DRIP && (events & EPOLLIN)
        && !bad_read(d, c, sizeof d->buf))
        return;
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        /* The server closed it (EOF) or reset it: whatever came first. */
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        events_close(d, c, err ? err : FAIL_EOF);
        return;
    }
    if (c->phase == CONN_MISBEHAVING && (events & EPOLLOUT))
        bad_write(d, c);
}
