"""Draw the app icon in every size the three systems ask for, from one drawing.

    .venv/bin/pip install -e '.[packaging]'     # Pillow
    .venv/bin/python packaging/make_icons.py    # rewrites launcher/resources/icons/

The drawing is the one `launcher/ui/theme.py` paints when no icon files exist (a rounded accent
square with a white `>_` prompt), so the window, the tray, the dock and the installers agree.
Each size is drawn on its own at 8x and scaled down, so the strokes of the 16 px icon are as
crisp as a hand-tuned one rather than a blur of the 1024 px one. The outputs are committed:
building the app does not need Pillow.

- PNG 16..1024: Linux's hicolor theme (16-512), the window icon (launcher/ui/app.py), the AppImage;
- launcher.ico (16-256): the Windows exe and its installer;
- launcher.icns (16-1024, with the @2x sizes): the macOS .app and .dmg.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image, ImageDraw

ACCENT = (0x3B, 0x82, 0xF6, 255)  # theme.ACCENT
WHITE = (255, 255, 255, 255)
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512, 1024)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_SIZES = (16, 32, 64, 128, 256, 512, 1024)
SUPERSAMPLE = 8

OUT = Path(__file__).resolve().parents[1] / "launcher" / "resources" / "icons"


def draw(size: int) -> Image.Image:
    """The icon at `size` x `size` pixels (RGBA)."""
    scale = size * SUPERSAMPLE
    image = Image.new("RGBA", (scale, scale), (0, 0, 0, 0))
    pen = ImageDraw.Draw(image)
    pen.rounded_rectangle((0, 0, scale - 1, scale - 1), radius=round(scale * 0.22), fill=ACCENT)
    width = round(max(1.5, size * 0.09) * SUPERSAMPLE)

    def at(x: float, y: float) -> tuple[float, float]:
        return (x * scale, y * scale)

    chevron = [at(0.25, 0.32), at(0.45, 0.5), at(0.25, 0.68)]
    pen.line(chevron, fill=WHITE, width=width, joint="curve")
    underscore = [at(0.52, 0.7), at(0.76, 0.7)]
    pen.line(underscore, fill=WHITE, width=width)
    # Round caps, as the Qt drawing has: a dot of the stroke's width on each open end.
    radius = width / 2
    for x, y in (chevron[0], chevron[-1], *underscore):
        pen.ellipse((x - radius, y - radius, x + radius, y + radius), fill=WHITE)
    return image.resize((size, size), Image.Resampling.LANCZOS)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    images = {size: draw(size) for size in PNG_SIZES}
    for size, image in images.items():
        image.save(OUT / f"launcher-{size}.png", optimize=True)
    largest = images[max(ICO_SIZES)]
    largest.save(
        OUT / "launcher.ico",
        sizes=[(size, size) for size in ICO_SIZES],
        append_images=[images[size] for size in ICO_SIZES if size != max(ICO_SIZES)],
    )
    images[1024].save(OUT / "launcher.icns", append_images=[images[size] for size in ICNS_SIZES[:-1]])
    for path in sorted(OUT.iterdir()):
        print(f"{path.relative_to(OUT.parents[2])}  {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
