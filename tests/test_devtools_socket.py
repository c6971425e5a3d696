"""The DevTools websocket client the web mode and OSWorld's Chrome getters send into guests
(envs/web/cdp.py ``Socket``), against a websocket server on loopback: a real handshake,
a message in fragments, and one large frame read in linear time (a bytes buffer copied
itself per 64 KB chunk: a 64 MB frame took about a minute)."""

from __future__ import annotations

import socket
import struct
import threading
import time

from parallel_rollout.envs.web.cdp import Socket


def frame(payload: bytes, *, final: bool = True, opcode: int = 1) -> bytes:
    """One unmasked server frame."""
    first = (0x80 if final else 0) | opcode
    n = len(payload)
    if n < 126:
        return struct.pack("!BB", first, n) + payload
    if n < 65536:
        return struct.pack("!BBH", first, 126, n) + payload
    return struct.pack("!BBQ", first, 127, n) + payload


def serve_once(frames: list[bytes]) -> tuple[int, threading.Thread]:
    """A listener that answers one websocket handshake, sending the first frame in the same
    packet as the 101, then the rest; (port, its thread)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener, listener.accept()[0] as conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n" + frames[0])
            for data in frames[1:]:
                conn.sendall(data)
            conn.recv(1)  # until the client hangs up

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


def test_fragments_and_a_large_frame_arrive_whole_in_linear_time():
    big = b'{"id": 1, "result": {"data": "' + b"A" * (64 << 20) + b'"}}'
    port, thread = serve_once([frame(b'{"method": "Page.', final=False),
                               frame(b'loadEventFired"}', final=True, opcode=0), frame(big)])
    client = Socket(f"ws://127.0.0.1:{port}/devtools/page/1", timeout=60)
    try:
        assert client.recv() == '{"method": "Page.loadEventFired"}'
        started = time.monotonic()
        message = client.recv()
        elapsed = time.monotonic() - started
    finally:
        client.sock.close()
        thread.join(10)
    assert len(message) == len(big) and message.endswith('AAAA"}}')
    # linear: well under a second on an idle machine; the quadratic buffer took ~60 s
    assert elapsed < 10, elapsed
