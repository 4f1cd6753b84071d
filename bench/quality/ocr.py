"""The OCR condition: each evaluation stream rendered as one 180-DPI text column and read back by Tesseract (the
paper used Apple Vision). Line breaks of our rendering collapse to single spaces; record spans come from aligning the
OCR text to the source stream (words first, then characters inside differing stretches).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from difflib import SequenceMatcher
from pathlib import Path

import numpy as np

from bench.quality.streams import Stream

DPI = 180
FONT_POINTS = 11
COLUMN_INCHES = 6.0
MARGIN_INCHES = 0.5
FONT_CANDIDATES = tuple(f"/usr/share/fonts/truetype/dejavu/DejaVu{face}.ttf" for face in ("Serif", "Sans"))


def render(text: str, path: str | Path) -> None:
    """Word-wrapped black-on-white PNG of ``text``: one column, 11 pt DejaVu at 180 DPI."""
    from PIL import Image, ImageDraw, ImageFont

    font_path = next((f for f in FONT_CANDIDATES if Path(f).exists()), None)
    size = round(FONT_POINTS * DPI / 72)
    font = ImageFont.truetype(font_path, size) if font_path else ImageFont.load_default(size)
    width, margin = round(COLUMN_INCHES * DPI), round(MARGIN_INCHES * DPI)
    lines = _wrap(text, lambda s: font.getlength(s), width)
    line_height = round(size * 1.35)
    image = Image.new("L", (width + 2 * margin, 2 * margin + line_height * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        draw.text((margin, margin + row * line_height), line, font=font, fill=0)
    image.save(path, dpi=(DPI, DPI))


def _wrap(text: str, measure, width: float) -> list[str]:
    """Greedy word wrap; a word wider than the column is split by characters."""
    lines, line = [], ""
    for word in text.split():
        while len(word) > 1 and measure(word) > width:
            cut = 1
            while measure(word[: cut + 1]) <= width:
                cut += 1
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:cut])
            word = word[cut:]
        candidate = f"{line} {word}" if line else word
        if line and measure(candidate) > width:
            lines.append(line)
            line = word
        else:
            line = candidate
    if line:
        lines.append(line)
    return lines


def tesseract(image: str | Path) -> str:
    """Tesseract's text for an image, whitespace collapsed to single spaces (one OpenMP thread: the same output,
    about 4x faster on a small shared machine)."""
    if shutil.which("tesseract") is None:
        raise SystemExit("bench.quality: tesseract is not installed (bench/setup.sh installs it; --no-ocr skips OCR)")
    command = ["tesseract", str(image), "stdout", "-l", "eng", "--dpi", str(DPI)]
    one_thread = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    result = subprocess.run(command, check=True, capture_output=True, text=True, env=one_thread)
    return " ".join(result.stdout.split())


def align_chars(source: str, ocr: str) -> np.ndarray:
    """For each OCR character, the source character it reads (-1 for none); monotone in both texts.

    Word-level matching first keeps this fast on 10k-character streams; stretches where words differ are
    then matched character by character.
    """
    mapping = np.full(len(ocr), -1, dtype=np.int64)
    src_words = [(m.start(), m.end()) for m in re.finditer(r"\S+", source)]
    ocr_words = [(m.start(), m.end()) for m in re.finditer(r"\S+", ocr)]
    words = SequenceMatcher(None, [source[a:b] for a, b in src_words], [ocr[a:b] for a, b in ocr_words], autojunk=False)
    for tag, i1, i2, j1, j2 in words.get_opcodes():
        if tag == "equal":
            for (sa, sb), (oa, _) in zip(src_words[i1:i2], ocr_words[j1:j2]):
                mapping[oa : oa + (sb - sa)] = np.arange(sa, sb)
        elif tag == "replace":
            s0, s1 = src_words[i1][0], src_words[i2 - 1][1]
            o0, o1 = ocr_words[j1][0], ocr_words[j2 - 1][1]
            chars = SequenceMatcher(None, source[s0:s1], ocr[o0:o1], autojunk=False)
            for a, b, size in chars.get_matching_blocks():
                mapping[o0 + b : o0 + b + size] = np.arange(s0 + a, s0 + a + size)
    return mapping


def ocr_stream(stream: Stream, ocr: str) -> tuple[Stream, float]:
    """The OCR text as a stream with projected record spans, and its character agreement with the source.

    Agreement = source non-space characters read back correctly / source non-space characters.
    """
    mapping = align_chars(stream.text, ocr)
    records = []
    position = 0
    for record_id, start, end in stream.records:
        inside = np.flatnonzero((mapping >= start) & (mapping < end))
        if len(inside):
            position = int(inside[-1]) + 1
            records.append((record_id, int(inside[0]), position))
        else:
            records.append((record_id, position, position))
    matched = sum(1 for i in mapping[mapping >= 0] if not stream.text[i].isspace())
    agreement = matched / max(1, sum(1 for ch in stream.text if not ch.isspace()))
    digest = hashlib.sha1(ocr.encode()).hexdigest()[:8]
    return Stream(f"{stream.id}-ocr-{digest}", stream.domain, "ocr", ocr, records), agreement


def ocr_streams(streams: list[Stream], cache_dir: str | Path) -> tuple[list[Stream], dict[str, float]]:
    """OCR versions of ``streams`` (Tesseract output cached per stream id) and each one's agreement."""
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    out, agreement = [], {}
    for stream in streams:
        path = cache / f"{stream.id}.txt"
        if not path.exists():
            with tempfile.TemporaryDirectory() as folder:
                image = Path(folder) / "page.png"
                render(stream.text, image)
                path.write_text(tesseract(image), encoding="utf-8")
        converted, agreement[stream.id] = ocr_stream(stream, path.read_text(encoding="utf-8"))
        out.append(converted)
    return out, agreement
