"""GIMP checks on what an edit did to an image: darker, more saturated or more contrasted
with the same structure, a triangle centred, text at the left edge, a green background,
the image's size (of its opaque part) or file size, and GIMP's settings file."""

from __future__ import annotations

import os
from typing import Any

from .images import open_image, mse_holds, ssim_holds


def _brightness(image) -> float:
    from PIL import ImageStat

    return ImageStat.Stat(image.convert("L")).mean[0]


def _normalised(image, target: float = 128):
    factor = target / _brightness(image)
    return image.point(lambda x: min(255, max(0, int(x * factor))))


def check_brightness_decrease_and_structure_sim(result: str | None, expected: str | None,
                                                threshold: float = 0.03, **options: Any) -> float:
    """The result is darker than the original and, both brought to the same brightness,
    differs from it by an MSE under ``threshold``."""
    if result is None or expected is None:
        return 0.0
    first, second = open_image(result), open_image(expected)
    darker = _brightness(second) > _brightness(first)
    return float(darker and mse_holds(_normalised(first), _normalised(second), threshold))


def check_saturation_increase_and_structure_sim(result: str | None, expected: str | None, **options: Any) -> float:
    """The result is more saturated, with alike hue and value channels."""
    import numpy as np

    if result is None or expected is None:
        return 0.0
    first, second = open_image(result).convert("HSV"), open_image(expected).convert("HSV")
    h1, s1, v1 = first.split()
    h2, s2, v2 = second.split()
    more = np.mean(np.array(s2)) < np.mean(np.array(s1))
    return float(bool(more) and ssim_holds(h1, h2) and ssim_holds(v1, v2))


def check_contrast_increase_and_structure_sim(result: str | None, expected: str | None, **options: Any) -> float:
    """The result's pixel standard deviation is higher, the structure alike (SSIM 0.65)."""
    import numpy as np

    if result is None or expected is None:
        return 0.0
    first, second = open_image(result), open_image(expected)
    higher = np.std(np.asarray(second, dtype=np.float32)) < np.std(np.asarray(first, dtype=np.float32))
    return float(bool(higher) and ssim_holds(first, second, threshold=0.65))


def check_triangle_position(result: str | None, **options: Any) -> float:
    """The second rarest colour's pixels have their centroid within 5% of the centre."""
    import numpy as np

    if result is None:
        return 0.0
    pixels = np.array(open_image(result))
    colours, counts = np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0, return_counts=True)
    triangle = colours[np.argsort(counts)][1]
    centroid = np.argwhere(np.all(pixels == triangle, axis=2)).mean(axis=0)
    shape = np.array(pixels.shape[:2])
    return float(bool(np.all(np.abs(centroid - shape / 2) < 0.05 * shape)))


def check_textbox_on_leftside(result: str | None, **options: Any) -> float:
    """The leftmost dark pixel (gray under 128) lies in the left 5% of the image."""
    import numpy as np

    if result is None:
        return 0.0
    image = open_image(result)
    dark = np.argwhere(np.array(image.convert("L")) < 128)
    leftmost = int(dark[:, 1].min()) if len(dark) else image.size[0]
    return float(leftmost < image.size[0] * 0.05)


def check_green_background(result: str | None, expected: str | None, **options: Any) -> float:
    """Wherever the expected image is not black, the result is green-dominant (indexing as
    OSWorld does: x as the array's row)."""
    import numpy as np

    if result is None or expected is None:
        return 0.0
    source, target = open_image(result), open_image(expected)
    mine, theirs = np.array(source), np.array(target)
    for x in range(target.width):
        for y in range(target.height):
            if tuple(theirs[x, y][:3]) != (0, 0, 0):
                r, g, b = mine[x, y][:3]
                if not (g > r and g > b):
                    return 0.0
    return 1.0


def check_image_size(result: str | None, rule: dict, **options: Any) -> float:
    """The image's (or, with ``ignore_transparent``, its opaque part's) width and height
    are the rule's."""
    if result is None:
        return 0.0
    image = open_image(result)
    if (rule.get("ignore_transparent", False) and image.mode in ("RGBA", "LA")) or "transparency" in image.info:
        image = image if image.mode == "RGBA" else image.convert("RGBA")
        box = image.split()[-1].getbbox()
        width, height = (0, 0) if box is None else (box[2] - box[0], box[3] - box[1])
    else:
        width, height = image.size
    return float((rule.get("height") is None or height == rule["height"])
                 and (rule.get("width") is None or width == rule["width"]))


def check_image_file_size(result: str | None, rule: dict, **options: Any) -> float:
    if result is None:
        return 0.0
    return float(os.path.getsize(result) < rule["max_size"])


def check_config_status(result: str | None, rule: dict, **options: Any) -> float:
    """A gimprc line ``(key … value)`` (key one word, or two) ends with the rule's value."""
    if result is None:
        return 0.0
    with open(result) as handle:
        for line in handle.readlines():
            if line.startswith("#") or line == "\n":
                continue
            items = line.strip().lstrip("(").rstrip(")\n").split()
            key = rule["key"]
            if isinstance(key, str) and items[0] == key and items[-1] == rule["value"]:
                return 1.0
            if isinstance(key, list) and len(key) == 2 and items[0] == key[0] and items[1] == key[1] \
                    and items[-1] == rule["value"]:
                return 1.0
    return 0.0


METRICS = {f.__name__: f for f in (
    check_brightness_decrease_and_structure_sim, check_saturation_increase_and_structure_sim,
    check_contrast_increase_and_structure_sim, check_triangle_position, check_textbox_on_leftside,
    check_green_background, check_image_size, check_image_file_size, check_config_status)}
