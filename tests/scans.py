"""Scanned-looking pages for the OCR tests: Japanese text rendered with a Japanese font from Debian's packages
(``fonts-noto-cjk``) and rasterised at 300 dpi, horizontal or vertical (tategaki), as images or image-only PDFs.

The same text gives the same pixels on every run (Pillow's rendering of one font file), so a character
error rate measured on them can be compared from run to run.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import Any

# Debian's fonts-noto-cjk; the first that exists is used.
FONTS = [Path("/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc"),
         Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")]
DPI = 300
A4 = (round(8.27 * DPI), round(11.69 * DPI))
POINTS = 14  # the type size, in points
MARGIN = DPI  # one inch

# 「羅生門」 (Akutagawa Ryunosuke, 1915, public domain): the opening, as in tests/data.
RASHOMON = ("ある日の暮方の事である。一人の下人が、羅生門の下で雨やみを待っていた。"
            "広い門の下には、この男のほかに誰もいない。ただ、所々丹塗の剥げた、大きな円柱に、蟋蟀が一匹とまっている。"
            "羅生門が、朱雀大路にある以上は、この男のほかにも、雨やみをする市女笠や揉烏帽子が、もう二三人はありそうなものである。"
            "それが、この男のほかには誰もいない。")
# 『春と修羅』序 (Miyazawa Kenji, 1924, public domain): one line per column.
HARU_TO_SHURA = [
    "わたくしといふ現象は",
    "假定された有機交流電燈の",
    "ひとつの青い照明です",
    "（あらゆる透明な幽霊の複合体）",
    "風景やみんなといっしょに",
    "せはしくせはしく明滅しながら",
    "いかにもたしかにともりつづける",
    "因果交流電燈の",
    "ひとつの青い照明です",
    "（ひかりはたもち、その電燈は失はれ）",
]


def font_path() -> Path | None:
    """The Japanese font, or None when fonts-noto-cjk is not installed."""
    return next((path for path in FONTS if path.is_file()), None)


def _font(size_px: int) -> Any:
    from PIL import ImageFont

    path = font_path()
    if path is None:
        raise FileNotFoundError("no Japanese font: apt-get install fonts-noto-cjk")
    return ImageFont.truetype(str(path), size_px, index=0)  # index 0 of the collection: the JP face


def horizontal_page(text: str = RASHOMON, chars_per_line: int = 36) -> Any:
    """A white A4 page at 300 dpi with ``text`` in lines of ``chars_per_line``, left to right, top to bottom."""
    from PIL import Image, ImageDraw

    size = round(POINTS * DPI / 72)
    image = Image.new("L", A4, 255)
    draw = ImageDraw.Draw(image)
    font = _font(size)
    y = MARGIN
    for line in textwrap.wrap(text, chars_per_line):
        draw.text((MARGIN, y), line, font=font, fill=0)
        y += round(size * 1.7)
    return image


def vertical_page(columns: list[str] = HARU_TO_SHURA) -> Any:
    """A white A4 page at 300 dpi with one column per item, top to bottom, right to left (vertical glyph
    forms through the font's ``vert`` feature)."""
    from PIL import Image, ImageDraw

    size = round(POINTS * DPI / 72)
    image = Image.new("L", A4, 255)
    draw = ImageDraw.Draw(image)
    font = _font(size)
    x = A4[0] - MARGIN - size
    for column in columns:
        draw.text((x, MARGIN), column, font=font, fill=0, direction="ttb", features=["vert"])
        x -= round(size * 1.8)
    return image


def image_bytes(image: Any, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    image.copy().save(out, format=fmt, dpi=(DPI, DPI))  # a copy: Pillow leaves the format's settings on the image
    return out.getvalue()


def image_pdf(*images: Any) -> bytes:
    """An image-only PDF, a page per image (no text layer: what a scanner writes)."""
    out = io.BytesIO()
    first, *rest = [image.convert("RGB") for image in images]
    first.save(out, format="PDF", resolution=DPI, save_all=True, append_images=rest)
    return out.getvalue()


def character_error_rate(found: str, truth: str) -> float:
    """Edit distance between the two texts over the length of ``truth``, whitespace left out (OCR and the
    reference break lines differently; Japanese has no spaces)."""
    a, b = "".join(found.split()), "".join(truth.split())
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1] / max(1, len(b))
