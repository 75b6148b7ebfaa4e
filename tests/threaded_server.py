"""A thread-per-connection server for tests of the load generator: Python's sockets, not
the lab's C, so a bug in either shows up on its own.

    class Echo(ThreadPerConnection):
        def admit(self, conn):          # under self.lock, as each connection is accepted
            self.count += 1
            return self.count - 1       # its index, handed to serve(); None: close it at once
        def serve(self, conn, index):   # in the connection's own thread (TCP_NODELAY set)
            while chunk := conn.recv(65536):
                conn.sendall(chunk)

`accept_after` delays the first accept(), `accept_every` spaces the accepts (a full accept
queue, on purpose).  stop() shuts every connection (which wakes a handler blocked in recv or
sendall), joins every thread, and fails if one did not stop.  A subclass sets its own
attributes before calling ThreadPerConnection.__init__, which starts accepting.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class ThreadPerConnection:
    def __init__(self, backlog: int = 128, accept_after: float = 0.0, accept_every: float = 0.0):
        self.accept_after, self.accept_every = accept_after, accept_every
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self.port = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.conns, self.threads = [], []
        self.acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self.acceptor.start()

    def admit(self, conn: socket.socket):
        """Record a new connection (called under self.lock); its index for serve(), or None to
        close it without serving."""
        return len(self.conns)

    def serve(self, conn: socket.socket, index) -> None:
        raise NotImplementedError

    def _accept_loop(self) -> None:
        if self.stopping.wait(self.accept_after):
            return
        self.listener.settimeout(0.05)
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with self.lock:
                index = self.admit(conn)
                if index is not None:
                    self.conns.append(conn)
                    worker = threading.Thread(target=self._run, args=(conn, index), daemon=True)
                    self.threads.append(worker)
            if index is None:
                conn.close()
                continue
            worker.start()
            if self.accept_every and self.stopping.wait(self.accept_every):
                return

    def _run(self, conn: socket.socket, index) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.serve(conn, index)
        except OSError:
            pass  # the client went away, or stop() shut the socket
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self.acceptor.join(timeout=5)
        self.listener.close()
        with self.lock:
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)  # wakes a handler blocked in recv or sendall
            threads = list(self.threads)
        for worker in threads:
            worker.join(timeout=5)
        assert not any(t.is_alive() for t in threads), "a test server thread did not stop"
