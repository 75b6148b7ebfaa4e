/* net.h -- TCP socket helpers: listen, accept, connect, non-blocking, nodelay.
 *
 * Same error convention as util.h: -1 with errno set; report with
 * warn_errno()/die_errno().  Hosts are numeric addresses or names
 * ("127.0.0.1", "::1", "localhost"); an unresolvable host fails with
 * errno EADDRNOTAVAIL.  Every descriptor is created close-on-exec.
 */
#ifndef LAB_NET_H
#define LAB_NET_H

#include <stdbool.h>
#include <sys/socket.h>

/* A resolved address, so a client opening thousands of connections
 * resolves once. */
struct net_addr {
    struct sockaddr_storage ss;
    socklen_t len;
};

int net_resolve(const char *host, int port, struct net_addr *out);

/* Listening socket on host:port with SO_REUSEADDR; port 0 = any free port.
 * The kernel caps backlog at net.core.somaxconn. */
int net_listen(const char *host, int port, int backlog);
/* The same with SO_REUSEPORT too: every socket of this user bound so to the
 * same address and port listens, and the kernel spreads new connections
 * over them by a hash of each connection's addresses and ports. */
int net_listen_reuseport(const char *host, int port, int backlog);
/* Bound with SO_REUSEADDR and SO_REUSEPORT but NOT listening: it holds the
 * port (port 0: picks a free one) for reuseport listeners to join, and is
 * never given a connection itself. */
int net_bind_reuseport(const char *host, int port);
/* The local port a socket is bound to, or -1. */
int net_local_port(int fd);

/* accept(), retried on EINTR; the new socket is blocking unless
 * `nonblocking`.  EAGAIN, EMFILE, ECONNABORTED ... are left to the caller. */
int net_accept(int listen_fd, bool nonblocking);

/* Blocking connect. */
int net_connect(const char *host, int port);
/* Connect to a resolved address.  With `nonblocking` the socket is
 * non-blocking and the connect may still be in progress (EINPROGRESS is
 * not an error): wait for writability, then call net_connect_result(). */
int net_connect_addr(const struct net_addr *addr, bool nonblocking);
/* 0 once a non-blocking connect succeeded, or -1 with errno = its error. */
int net_connect_result(int fd);

int net_set_nonblocking(int fd, bool on);
int net_set_nodelay(int fd, bool on);

#endif
