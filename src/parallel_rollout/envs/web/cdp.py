"""The DevTools client the guest programs share (the web mode's driver, ``browser.py``, and
OSWorld's Chrome steps, ``envs/osworld/chrome.py``): a minimal websocket client and a loopback
HTTP GET. Standard library only, and no ``__future__`` import: its source is sent to the guest
ahead of theirs, as one program (``envs/web/env.py`` ``driver_source``)."""

import base64
import json
import os
import socket
import struct

CDP_PORT = 9222


# -- a minimal websocket client (RFC 6455, text frames, client-masked) ----------------------


class Socket:
    """One websocket connection to a DevTools target."""

    def __init__(self, url, timeout):
        rest = url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the DevTools port closed during the handshake")
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        # a bytearray: appending a chunk and cutting a frame off the front stay linear, where
        # bytes copied the whole buffer per 64 KB chunk (a 64 MB frame took a minute)
        self.buffer = bytearray(rest)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the websocket: {head[:200]!r}")
        self.next_id = 0

    def send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + body)

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the DevTools connection closed")
            self.buffer += chunk
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def recv(self):
        message = bytearray()
        while True:
            first, second = self._read(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            opcode = first & 0x0F
            if opcode == 8:
                raise ConnectionError("the DevTools connection was closed by the browser")
            if opcode in (0, 1, 2):
                message += payload
                if first & 0x80:
                    return message.decode("utf-8", "replace")

    def call(self, method, **params):
        """Send one CDP command and return its result (events in between are skipped)."""
        self.next_id += 1
        self.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})


def http_get(port, path, timeout=2.0):
    """(status, body) of a GET on a loopback port; no urllib: its imports cost ~100 ms."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        data, length = b"", None
        while True:
            if length is None and b"\r\n\r\n" in data:
                for line in data.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
            if length is not None and len(data.partition(b"\r\n\r\n")[2]) >= length:
                break
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)
    if len(status) < 2 or not status[1].isdigit():
        raise ConnectionError(f"not an HTTP answer from port {port}: {data[:100]!r}")
    return int(status[1]), body


def http_json(path, timeout=2.0):
    return json.loads(http_get(CDP_PORT, path, timeout)[1])
