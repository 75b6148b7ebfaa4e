/* The classic bug: one write() of everything the session offers, and the
 * whole length reported to session_did_write() whatever write() returned.
 * Errors other than EAGAIN still close the connection, so simple
 * request/reply cases pass.  But on a non-blocking socket write() takes only
 * what fits in the kernel's send buffer, and nothing (EAGAIN) once it is
 * full: the rest is dropped as if sent.  The battery must catch it: a client
 * that reads slowly (echo of megabytes, read only later) loses bytes. */
static bool flush_output(struct conn *conn)
{
    size_t len;
    const char *pending = session_write_buf(conn->session, &len);
    if (len == 0)
        return true;
    if (write(conn->fd, pending, len) < 0 && errno != EAGAIN)
        return false;
    session_did_write(conn->session, len); /* BUG: write() may have taken fewer bytes, or none */
    return true;
}
