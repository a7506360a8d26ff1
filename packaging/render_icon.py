"""Render resources/fatstudio.png (256×256) from resources/fatstudio.svg: .venv/bin/python packaging/render_icon.py"""
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

RES = Path(__file__).resolve().parents[1] / "resources"


def main(size: int = 256) -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (fonts, image formats)
    renderer = QSvgRenderer(str(RES / "fatstudio.svg"))
    if not renderer.isValid():
        print("fatstudio.svg is not valid SVG", file=sys.stderr)
        return 1
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    out = RES / "fatstudio.png"
    if not image.save(str(out)):
        print(f"could not write {out}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({size}×{size})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
