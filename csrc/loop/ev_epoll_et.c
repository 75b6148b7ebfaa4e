/* ev_epoll_et.c -- the epoll backend, edge-triggered: ev_epoll.c with
 * EPOLLET on every descriptor.  The whole difference is that one flag; what
 * it demands of the loop is in loop.c (serve_client_edge). */
#define EV_EPOLL_EDGE_TRIGGERED
#include "ev_epoll.c"
