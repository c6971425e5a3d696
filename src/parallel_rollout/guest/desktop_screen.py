"""The desktop's screenshot: the X frame buffer read with ``XGetImage`` through ctypes, the
cursor from ``XFixesGetCursorImage`` pasted at the pointer as OSWorld does, and the PNG
encoded with zlib, all standard library (libX11 and libXfixes come with Xvfb).

With ``--run-as`` the X server is the commands' user's (they may kill it and serve :0
themselves), so its replies are never parsed inside the agent, which keeps capabilities:
this file runs as a child, as that user (``python3 desktop_screen.py W H``: the PNG on its
stdout: a process start more than in the agent, ~20-50 ms on 2 cores, as the child imports
nothing but ctypes and zlib; and an X error, which makes libX11 exit, ends the child only).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import zlib


class CaptureError(Exception):
    """The screen could not be read; the agent answers it as a DesktopError 500."""


class _XImage(ctypes.Structure):
    _fields_ = [("width", ctypes.c_int), ("height", ctypes.c_int), ("xoffset", ctypes.c_int),
                ("format", ctypes.c_int), ("data", ctypes.POINTER(ctypes.c_ubyte)),
                ("byte_order", ctypes.c_int), ("bitmap_unit", ctypes.c_int),
                ("bitmap_bit_order", ctypes.c_int), ("bitmap_pad", ctypes.c_int),
                ("depth", ctypes.c_int), ("bytes_per_line", ctypes.c_int),
                ("bits_per_pixel", ctypes.c_int)]


class _CursorImage(ctypes.Structure):
    _fields_ = [("x", ctypes.c_short), ("y", ctypes.c_short), ("width", ctypes.c_ushort),
                ("height", ctypes.c_ushort), ("xhot", ctypes.c_ushort),
                ("yhot", ctypes.c_ushort), ("cursor_serial", ctypes.c_ulong),
                ("pixels", ctypes.POINTER(ctypes.c_ulong))]


_libs: dict = {}
_x_lock = threading.Lock()


def xlib():
    """libX11 and libXfixes (None when missing) with the prototypes used here, loaded once."""
    if not _libs:
        x11 = ctypes.CDLL("libX11.so.6")
        x11.XOpenDisplay.restype = ctypes.c_void_p
        x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
        x11.XDefaultRootWindow.restype = ctypes.c_ulong
        x11.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
        x11.XGetImage.restype = ctypes.POINTER(_XImage)
        x11.XGetImage.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_uint, ctypes.c_uint, ctypes.c_ulong, ctypes.c_int]
        x11.XDestroyImage.argtypes = [ctypes.POINTER(_XImage)]
        x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
        x11.XFree.argtypes = [ctypes.c_void_p]
        _libs["x11"] = x11
        try:
            fixes = ctypes.CDLL("libXfixes.so.3")
            fixes.XFixesGetCursorImage.restype = ctypes.POINTER(_CursorImage)
            fixes.XFixesGetCursorImage.argtypes = [ctypes.c_void_p]
            _libs["xfixes"] = fixes
        except OSError:
            _libs["xfixes"] = None
    return _libs["x11"], _libs["xfixes"]


def screenshot_png() -> bytes:
    """The screen as PNG bytes, with the cursor pasted at the pointer (taken by a child as
    the commands' user with ``--run-as``, see the module doc)."""
    # the agent's modules, imported here: the child (below) must start fast
    try:
        from . import agent_commands
        from .desktop import HELPER_TIMEOUT_S, DesktopError, require_desktop, state
    except ImportError:  # a sibling file in the guest, not a package
        import agent_commands  # type: ignore[no-redef]
        from desktop import HELPER_TIMEOUT_S, DesktopError, require_desktop, state  # type: ignore[no-redef]
    require_desktop()
    width, height = state["width"] or 0, state["height"] or 0
    if agent_commands.run_as is None:
        try:
            return capture_png(width, height)
        except CaptureError as exc:
            raise DesktopError(500, str(exc)) from None
    import subprocess

    argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), str(width), str(height)]
    try:
        child = subprocess.run(agent_commands.as_user(argv), stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=HELPER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise DesktopError(500, f"the screenshot took over {HELPER_TIMEOUT_S:g}s") from None
    if child.returncode != 0 or not child.stdout.startswith(b"\x89PNG"):
        raise DesktopError(500, f"the screenshot failed ({child.returncode}): "
                                f"{child.stderr.decode('utf-8', 'replace').strip()[-500:]}")
    return child.stdout


def capture_png(width: int, height: int) -> bytes:
    """The screen's top-left ``width`` x ``height`` as PNG bytes, read in this process."""
    x11, fixes = xlib()
    with _x_lock:
        display = x11.XOpenDisplay(os.environ["DISPLAY"].encode())
        if not display:
            raise CaptureError(f"cannot open display {os.environ['DISPLAY']}")
        try:
            image = x11.XGetImage(display, x11.XDefaultRootWindow(display), 0, 0, width,
                                  height, 0xFFFFFFFF, 2)  # 2 = ZPixmap
            if not image:
                raise CaptureError("XGetImage failed")
            try:
                info = image.contents
                stride = info.bytes_per_line
                raw = ctypes.string_at(info.data, stride * info.height)
                bpp = info.bits_per_pixel
            finally:
                x11.XDestroyImage(image)
            cursor = _cursor(fixes, display, x11)
        finally:
            x11.XCloseDisplay(display)
    if bpp != 32:
        raise CaptureError(f"unsupported screen depth: {bpp} bits per pixel")
    rgb = bytearray(width * height * 3)
    pixels = raw if stride == width * 4 else b"".join(
        raw[row * stride:row * stride + width * 4] for row in range(height))
    # X gives B, G, R, pad per pixel (little-endian); PNG wants R, G, B
    rgb[0::3], rgb[1::3], rgb[2::3] = pixels[2::4], pixels[1::4], pixels[0::4]
    if cursor is not None:
        _paste_cursor(rgb, width, height, *cursor)
    return _encode_png(rgb, width, height)


def _cursor(fixes, display, x11):
    if fixes is None:
        return None
    image = fixes.XFixesGetCursorImage(display)
    if not image:
        return None
    try:
        c = image.contents
        count = c.width * c.height
        argb = [c.pixels[i] & 0xFFFFFFFF for i in range(count)]
        return (c.x - c.xhot, c.y - c.yhot, c.width, c.height, argb)
    finally:
        x11.XFree(image)


def _paste_cursor(rgb: bytearray, width: int, height: int, left: int, top: int,
                  cw: int, ch: int, argb: list[int]) -> None:
    """Alpha-blend the cursor's premultiplied ARGB pixels onto the RGB frame."""
    for cy in range(ch):
        y = top + cy
        if not 0 <= y < height:
            continue
        for cx in range(cw):
            x = left + cx
            pixel = argb[cy * cw + cx]
            alpha = pixel >> 24
            if not alpha or not 0 <= x < width:
                continue
            at = (y * width + x) * 3
            keep = 255 - alpha
            for channel, shift in enumerate((16, 8, 0)):
                rgb[at + channel] = min(255, ((pixel >> shift) & 0xFF) + rgb[at + channel] * keep // 255)


def _encode_png(rgb: bytes | bytearray, width: int, height: int) -> bytes:
    import struct

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    row = width * 3
    view = memoryview(rgb)
    scanlines = b"".join(b"\x00" + view[y * row:(y + 1) * row] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(scanlines, 1)) + chunk(b"IEND", b""))



if __name__ == "__main__":
    try:
        sys.stdout.buffer.write(capture_png(int(sys.argv[1]), int(sys.argv[2])))
    except CaptureError as exc:
        sys.exit(f"desktop_screen.py: {exc}")
