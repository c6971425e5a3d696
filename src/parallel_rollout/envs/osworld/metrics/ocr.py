"""``compare_image_text``: a text appears in an image (a screenshot, XWD screen dumps
included), by optical character recognition.

OSWorld reads the image with EasyOCR, whose models are downloaded when it first runs; that
cannot happen offline, so this metric reads it with Tesseract (Debian's ``tesseract-ocr``,
which ``./dev`` installs), an OCR engine of its own: where the two engines read a text
differently, scores can differ. Without the ``tesseract`` program the metric fails with an
error naming the package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

#: seconds one image may take to read
OCR_TIMEOUT_S = 120.0


def image_text(path: str) -> str:
    """The words Tesseract reads in the image, joined by single spaces."""
    from PIL import Image

    program = shutil.which("tesseract")
    if program is None:
        raise RuntimeError("compare_image_text needs the tesseract program (apt-get install tesseract-ocr)")
    with tempfile.TemporaryDirectory() as folder:
        png = os.path.join(folder, "image.png")
        Image.open(path).convert("RGB").save(png)  # XWD dumps and other formats, as PNG
        run = subprocess.run([program, png, "stdout", "-l", "eng"], capture_output=True, text=True,
                             timeout=OCR_TIMEOUT_S)
    if run.returncode != 0:
        raise RuntimeError(f"tesseract failed: {run.stderr.strip()[-500:]}")
    return " ".join(run.stdout.split())


def compare_image_text(result: str | None, rule: dict, **options: Any) -> float:
    """1 when ``rule["text"]`` (``type: text``) is in the image's text."""
    if not result or not os.path.exists(result):
        return 0.0
    if rule["type"] != "text":
        raise ValueError("compare_image_text: unsupported rule type")
    return float(rule["text"] in image_text(result))


METRICS = {"compare_image_text": compare_image_text}
