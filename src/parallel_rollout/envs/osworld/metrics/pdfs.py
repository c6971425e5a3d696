"""PDF and archive metrics: text similarity of PDFs (PyMuPDF's text, rapidfuzz's ratio), the
images inside PDFs (perceptual hashes), page counts (pypdf), archives unpacked and compared
file by file with another metric, EPUB books compared part by part.

Libraries (pymupdf, imagehash, pypdf, lxml) are the ``[osworld]`` extra, imported when called.
"""

from __future__ import annotations

import difflib
import io
import operator
import os
import shutil
import tempfile
import zipfile
from typing import Any

from . import docs, editor, images, media, slides, table


def _pdf_text(path: str) -> str:
    import fitz

    with fitz.open(path) as document:
        return "".join(page.get_text() for page in document).strip()


def compare_pdfs(result, expected, **options: Any) -> float:
    """Mean text similarity of result/expected PDF pairs (one pair, or two lists); a pair
    that cannot be read scores 0."""
    from rapidfuzz import fuzz

    if type(expected) is not list:
        result, expected = [result], [expected]
    total = 0.0
    for mine, theirs in zip(result, expected):
        try:
            total += fuzz.ratio(_pdf_text(mine), _pdf_text(theirs)) / 100
        except Exception:
            pass
    return total / len(expected)


def _pdf_images(path: str) -> list:
    import fitz
    from PIL import Image

    images = []
    with fitz.open(path) as document:
        for page in document:
            for info in page.get_images(full=True):
                try:
                    images.append(Image.open(io.BytesIO(document.extract_image(info[0])["image"])))
                except Exception:
                    continue
    return images


def compare_pdf_images(result: str | None, expected: str | None, **options: Any) -> float:
    """Share of the PDFs' images (in order) whose perceptual hashes differ by at most 5 bits;
    0 when their counts differ, 1 when neither has images."""
    import imagehash

    if not result or not expected or not (os.path.exists(result) and os.path.exists(expected)):
        return 0.0
    try:
        first, second = _pdf_images(result), _pdf_images(expected)
    except Exception:
        return 0.0
    if len(first) != len(second):
        return 0.0
    if not first:
        return 1.0
    return sum(imagehash.phash(a) - imagehash.phash(b) <= 5 for a, b in zip(first, second)) / len(first)


def check_pdf_pages(result: str | None, rules: dict, **options: Any) -> float:
    """The page count compared to ``ref_value`` by ``relation`` (eq, lt, ge …)."""
    from pypdf import PdfReader

    if result is None:
        return 0.0
    return float(getattr(operator, rules["relation"])(len(PdfReader(result).pages), rules["ref_value"]))


#: compare_archive's ``file_type`` -> the metric that scores a pair of its members (named
#: directly, not looked up in the registry this module is part of)
ARCHIVE_MEMBER_METRICS = {"text": editor.compare_text_file, "pdf": compare_pdfs, "docx": docs.compare_docx_files,
                          "ppt": slides.compare_pptx_files, "image": images.compare_images, "csv": table.compare_csv,
                          "table": table.compare_table, "audio": media.compare_audios, "video": media.compare_videos}


def archive_member_metric(kind: str):
    """The metric that scores one pair of archive members of ``file_type`` ``kind``."""
    if kind not in ARCHIVE_MEMBER_METRICS:
        raise ValueError(f"compare_archive: file type {kind!r} is not supported")
    return ARCHIVE_MEMBER_METRICS[kind]


def compare_archive(result: str | None, expected: str, **options: Any) -> float:
    """Both archives unpacked (under ``file_path`` inside them) list the same names; the mean
    score of ``file_type``'s metric (default text) over the file pairs."""
    options = dict(options)
    inner = options.pop("file_path", "")
    if not result:
        return 0.0
    mine_dir = os.path.splitext(result)[0] + "_pred"
    gold_dir = os.path.splitext(expected)[0] + "_gold"
    shutil.rmtree(mine_dir, ignore_errors=True)
    os.makedirs(mine_dir)
    shutil.unpack_archive(result, mine_dir)
    if not os.path.exists(gold_dir):
        os.makedirs(gold_dir)
        shutil.unpack_archive(expected, gold_dir)
    mine = sorted(os.listdir(os.path.join(mine_dir, inner)))
    gold = sorted(os.listdir(os.path.join(gold_dir, inner)))
    if mine != gold:
        return 0.0
    metric = archive_member_metric(options.pop("file_type", "text"))
    total = sum(metric(os.path.join(mine_dir, inner, a), os.path.join(gold_dir, inner, b), **options)
                for a, b in zip(mine, gold))
    return total / len(mine)


def _epub_parts(path: str, folder: str) -> list[str]:
    """The book's toc.ncx without navPoint lines, content.opf without dc:identifier lines and
    its HTML files re-serialised, written under ``folder``; their paths, sorted."""
    import lxml.html

    written = []
    try:
        with zipfile.ZipFile(path) as book:
            names = book.namelist()
            for name, drop in (("toc.ncx", "navPoint"), ("content.opf", "dc:identifier")):
                if name in names:
                    lines = book.read(name).decode().splitlines()
                    target = os.path.join(folder, name)
                    with open(target, "w") as out:
                        out.writelines(line + "\n" for line in lines if drop not in line)
                    written.append(target)
            for name in names:
                if name.endswith(".html"):
                    text = "".join(ch for ch in book.read(name).decode() if ch not in "\r\n")
                    target = os.path.join(folder, name)
                    with open(target, "w") as out:
                        out.write(lxml.html.tostring(lxml.html.fromstring(text.encode()),
                                                     pretty_print=True, encoding="unicode"))
                    written.append(target)
    except zipfile.BadZipFile:
        return []
    return sorted(written)


def compare_epub(result: str | None, expected: str, **options: Any) -> float:
    """Mean line similarity (difflib) of the two books' parts, paired in sorted order."""
    if result is None:
        return 0.0
    with tempfile.TemporaryDirectory() as mine_dir, tempfile.TemporaryDirectory() as gold_dir:
        mine, gold = _epub_parts(result, mine_dir), _epub_parts(expected, gold_dir)
        total = 0.0
        for a, b in zip(mine, gold):
            with open(a) as fa, open(b) as fb:
                total += difflib.SequenceMatcher(a=fa.read().splitlines(), b=fb.read().splitlines()).ratio()
        return total / len(mine) if mine else total


METRICS = {f.__name__: f for f in (compare_pdfs, compare_pdf_images, check_pdf_pages, compare_archive,
                                   compare_epub)}
