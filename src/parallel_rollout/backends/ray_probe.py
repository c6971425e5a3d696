"""Whether what takes a TCP connection at a Ray cluster's address is its head node's GCS (a
gRPC server), asked as ``ray_cluster.check_reachable`` checks the address, before ray.init.

Nothing here imports Ray.
"""

from __future__ import annotations

import errno
import os
import socket


#: what an HTTP/2 client says first (RFC 9113 3.4), then its SETTINGS frame, empty
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def answers_as_grpc(conn: socket.socket, wait_s: float) -> None:
    """OSError unless what took the connection answers as a head node's GCS (a gRPC server):
    its SETTINGS frame within ``wait_s`` (the connection's timeout). ray.init waited for
    ever, its warnings only saying "Failed to get cluster ID from GCS server", on another
    service's port (the dashboard's, a web server's) or a head that takes connections and
    answers nothing. Not asked of a cluster on TLS (RAY_USE_TLS), whose GCS speaks TLS first."""
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return
    conn.sendall(_H2_PREFACE)
    said = b""
    try:
        while len(said) < 9 and (chunk := conn.recv(64)):
            said += chunk
    except socket.timeout:
        if not said:
            raise OSError(errno.ETIMEDOUT, f"it takes connections but said nothing within {wait_s:.0f}s "
                          "(a head node's GCS answers at once: one that hangs, or not a Ray cluster)") from None
    if len(said) < 4 or said[3] != 4:  # the frame's type: SETTINGS
        text = said.decode("latin-1").splitlines()[0][:80] if said.strip() else "nothing, it hung up"
        raise OSError(errno.EPROTO, f"it answers, but not as a Ray head node's GCS (it said {text!r}): the GCS "
                      "port is 6379 unless `ray start --head --port` set another (not the dashboard's 8265)")
