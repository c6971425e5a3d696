"""Image metrics: SSIM similarity of two images (``compare_images``), identical image lists,
and OSWorld's GIMP checks built on structure similarity (SSIM on RGB, MSE after brightness
normalisation): mirrored, resized, exported, palette-based images. Pillow, numpy and
scikit-image are the ``[osworld]`` extra, imported when called."""

from __future__ import annotations

import os
from typing import Any


def open_image(path: str):
    """The image at ``path`` (PIL, opened lazily; what every image metric compares)."""
    from PIL import Image

    return Image.open(path)


def ssim_holds(first, second, threshold: float = 0.9) -> bool:
    """SSIM of two same-size RGB versions of the images reaches ``threshold`` (a 7-pixel
    window, smaller for tiny images; images under 7 pixels a side are never alike)."""
    import numpy as np
    from skimage.metrics import structural_similarity

    if min(first.width, first.height, second.width, second.height) < 7:
        return False
    first = first if first.mode == "RGB" else first.convert("RGB")
    second = second if second.mode == "RGB" else second.convert("RGB")
    if first.size != second.size:
        return False
    a, b = np.array(first), np.array(second)
    if a.shape != b.shape:
        return False
    smallest = min(a.shape[0], a.shape[1])
    window = 7 if smallest >= 7 else (smallest if smallest % 2 else smallest - 1)
    try:
        return structural_similarity(a, b, win_size=window, channel_axis=2) >= threshold
    except Exception:
        return False


def mse_holds(first, second, threshold: float = 0.03) -> bool:
    """Mean squared difference of the RGB images (0..1 scale, the first resized to the
    second) below ``threshold``."""
    import numpy as np
    from PIL import Image

    if first.size != second.size:
        first = first.resize(second.size, Image.Resampling.LANCZOS)
    first = first if first.mode == "RGB" else first.convert("RGB")
    second = second if second.mode == "RGB" else second.convert("RGB")
    diff = np.array(first, dtype=np.float32) / 255 - np.array(second, dtype=np.float32) / 255
    return bool(np.mean(diff ** 2) < threshold)


def compare_images(result: str | None, expected: str | None, **options: Any) -> float:
    """SSIM of the grayscale images, both resized to the smaller size; rescaled above
    ``reference_base_result`` when given (0 at or below it plus 0.01)."""
    import numpy as np
    from PIL import Image
    from skimage.metrics import structural_similarity

    if not result or not expected:
        return 0.0
    base = options.get("reference_base_result", None)
    first, second = Image.open(result).convert("L"), Image.open(expected).convert("L")
    size = min(first.size, second.size)
    first = first.resize(size, Image.Resampling.LANCZOS)
    second = second.resize(size, Image.Resampling.LANCZOS)
    similarity = structural_similarity(np.array(first), np.array(second))
    if base is None:
        return similarity
    return (similarity - base) / (1 - base) if similarity >= base + 0.01 else 0.0


def compare_image_list(result, expected, **options: Any) -> float:
    """1 when each result image has the same pixels as its expected one (resized and
    converted to it first)."""
    from PIL import Image, ImageChops

    if type(result) is not list:
        result, expected = [result], [expected]
    for mine, gold in zip(result, expected):
        if not mine or not gold:
            return 0.0
        mine_image, gold_image = Image.open(mine), Image.open(gold)
        if mine_image.size != gold_image.size:
            mine_image = mine_image.resize(gold_image.size, Image.Resampling.LANCZOS)
        if mine_image.mode != gold_image.mode:
            mine_image = mine_image.convert(gold_image.mode)
        if ImageChops.difference(mine_image, gold_image).getbbox():
            return 0.0
    return 1.0


def check_structure_sim(result: str | None, expected: str | None, **options: Any) -> float:
    """Same size and alike (SSIM 0.9)."""
    if result is None or expected is None:
        return 0.0
    try:
        first, second = open_image(result), open_image(expected)
        return float(first.size == second.size and ssim_holds(first, second))
    except Exception:
        return 0.0


def check_structure_sim_with_threshold(result: str | None, expected: str | None, **options: Any) -> float:
    """The result, resized to the expected size, is alike it with SSIM at least
    ``ssim_threshold`` (default 0.85). (OSWorld's newer metric, not in desktop-env 1.0.2:
    written from its source at commit 87df18f.)"""
    import numpy as np
    from PIL import Image
    from skimage.metrics import structural_similarity

    if result is None or expected is None:
        return 0.0
    try:
        first, second = open_image(result), open_image(expected)
        if first.size != second.size:
            first = first.resize(second.size, Image.Resampling.LANCZOS)
        a = np.array(first if first.mode == "RGB" else first.convert("RGB"))
        b = np.array(second if second.mode == "RGB" else second.convert("RGB"))
        smallest = min(a.shape[0], a.shape[1])
        window = 7 if smallest >= 7 else (smallest if smallest % 2 else smallest - 1)
        if window < 1:
            return 0.0
        score = structural_similarity(a, b, win_size=window, channel_axis=2)
        return float(score >= options.get("ssim_threshold", 0.85))
    except Exception:
        return 0.0


def check_file_exists_and_structure_sim(result: str | None, expected: str | None, **options: Any) -> float:
    """The exported file exists and is alike the expected one."""
    if result is None or expected is None or not os.path.isfile(result):
        return 0.0
    return float(ssim_holds(open_image(result), open_image(expected)))


def check_structure_sim_resized(result: str | None, expected: str | None, **options: Any) -> float:
    """The result (its opaque part, for a transparent image) resized to the expected size
    is alike it."""
    if result is None or expected is None:
        return 0.0
    first, second = open_image(result), open_image(expected)
    if first.mode in ("RGBA", "LA") or "transparency" in first.info:
        first = first if first.mode == "RGBA" else first.convert("RGBA")
        box = first.split()[-1].getbbox()
        if box is None:
            return 0.0
        first = first.crop(box).convert("RGB")
    first = first.resize(second.size)
    second = second if second.mode == "RGB" else second.convert("RGB")
    return float(ssim_holds(first, second))


def check_image_mirror(result: str | None, expected: str | None, **options: Any) -> float:
    """The result flipped left-right is the expected image (SSIM 0.99)."""
    from PIL import Image

    if result is None or expected is None:
        return 0.0
    mirrored = open_image(result).transpose(Image.FLIP_LEFT_RIGHT)
    return float(ssim_holds(mirrored, open_image(expected), 0.99))


def check_palette_and_structure_sim(result: str | None, expected: str | None, **options: Any) -> float:
    """The result is palette-based (mode P) and alike the expected image."""
    if result is None or expected is None:
        return 0.0
    try:
        first, second = open_image(result), open_image(expected)
        first.load()
        second.load()
        return float(first.mode == "P" and ssim_holds(first.convert("RGB"), second))
    except Exception:
        return 0.0


METRICS = {f.__name__: f for f in (
    compare_images, compare_image_list, check_structure_sim, check_structure_sim_with_threshold,
    check_file_exists_and_structure_sim,
    check_structure_sim_resized, check_image_mirror, check_palette_and_structure_sim)}
