/* net.c -- see net.h. */
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

int net_resolve(const char *host, int port, struct net_addr *out)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
    struct addrinfo *res;
    char service[16];

    if (port < 0 || port > 65535) {
        errno = EINVAL;
        return -1;
    }
    snprintf(service, sizeof service, "%d", port);
    if (getaddrinfo(host, service, &hints, &res) != 0) {
        errno = EADDRNOTAVAIL;
        return -1;
    }
    memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
    out->len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* Close fd without letting close() overwrite the errno being reported. */
static int fail_closing(int fd)
{
    int err = errno;
    close(fd);
    errno = err;
    return -1;
}

/* A TCP socket bound to host:port with SO_REUSEADDR (and SO_REUSEPORT). */
static int bound_socket(const char *host, int port, bool reuseport)
{
    struct net_addr addr;
    int one = 1;

    if (net_resolve(host, port, &addr) < 0)
        return -1;
    int fd = socket(addr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) ||
        bind(fd, (struct sockaddr *)&addr.ss, addr.len) < 0)
        return fail_closing(fd);
    return fd;
}

static int listening_socket(const char *host, int port, int backlog, bool reuseport)
{
    int fd = bound_socket(host, port, reuseport);
    if (fd < 0)
        return -1;
    if (listen(fd, backlog) < 0)
        return fail_closing(fd);
    return fd;
}

int net_listen(const char *host, int port, int backlog)
{
    return listening_socket(host, port, backlog, false);
}

int net_listen_reuseport(const char *host, int port, int backlog)
{
    return listening_socket(host, port, backlog, true);
}

int net_bind_reuseport(const char *host, int port)
{
    return bound_socket(host, port, true);
}

int net_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    errno = EAFNOSUPPORT;
    return -1;
}

int net_accept(int listen_fd, bool nonblocking)
{
    int flags = SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0);
    int fd;
    do
        fd = accept4(listen_fd, NULL, NULL, flags);
    while (fd < 0 && errno == EINTR);
    return fd;
}

int net_connect_addr(const struct net_addr *addr, bool nonblocking)
{
    int type = SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0);
    int fd = socket(addr->ss.ss_family, type, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)&addr->ss, addr->len) == 0)
        return fd;
    if (nonblocking && errno == EINPROGRESS)
        return fd;
    /* A blocking connect interrupted by a signal goes on in the background:
     * wait for it like a non-blocking one (connect() must not be retried). */
    if (errno == EINTR) {
        fd_set w;
        FD_ZERO(&w);
        if (fd < FD_SETSIZE) {
            int r;
            do {
                FD_SET(fd, &w);
                r = select(fd + 1, NULL, &w, NULL, NULL);
            } while (r < 0 && errno == EINTR);
            if (r > 0 && net_connect_result(fd) == 0)
                return fd;
        }
    }
    return fail_closing(fd);
}

int net_connect(const char *host, int port)
{
    struct net_addr addr;
    if (net_resolve(host, port, &addr) < 0)
        return -1;
    return net_connect_addr(&addr, false);
}

int net_connect_result(int fd)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        return -1;
    if (err != 0) {
        errno = err;
        return -1;
    }
    return 0;
}

int net_set_nonblocking(int fd, bool on)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0)
        return -1;
    flags = on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK;
    return fcntl(fd, F_SETFL, flags);
}

int net_set_nodelay(int fd, bool on)
{
    int v = on;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v);
}
