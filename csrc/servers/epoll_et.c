/* epoll_et.c -- one thread serves every connection, waiting with epoll in
 * edge-triggered mode (ev_epoll_et.c: EPOLLET).  The loop is the same
 * loop.c, which sees ev_edge_triggered() and drains every socket to EAGAIN
 * (serve_client_edge): with edges, bytes left unread are not reported
 * again until more arrive, which a client waiting for its reply never sends.  Compare with epoll.c. */
#include "common/server_main.h"
#include "loop/loop.h"

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "epoll_et",
        .summary = "Serves every connection from one thread, waiting with epoll (edge-triggered).",
        .has_idle_timeout = true,
        .serve = loop_serve,
    };
    return server_main(argc, argv, &model);
}
