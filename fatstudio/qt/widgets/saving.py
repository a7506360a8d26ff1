"""What every view saves with: the dialog that asks where (`save_with_dialog`), the line that says what came of
it (`show_message`), and a picture written whole or not at all (`write_picture`)."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QFileDialog, QLabel, QWidget

from ...core.files import atomic_write
from ...core.runs.targets import check_output


def save_with_dialog(parent: QWidget, name: str, filt: str, suffix: str, fn, message: QLabel,
                     kept: str = "") -> None:
    """Ask where to save (``name`` + ``suffix`` proposed), write with ``fn(path)`` and say in ``message`` what
    came of it: the path saved (after ``kept``, a summary the label keeps), or why not (red)."""
    path, _ = QFileDialog.getSaveFileName(parent, "Export", name + suffix, filt)
    if not path:
        return
    if not path.lower().endswith(suffix):
        path += suffix
    try:
        check_output(path, "the file")  # never into a run folder, a folder or a FIFO
        fn(path)
    except (OSError, ValueError) as e:
        show_message(message, f"Export failed: {e}", error=True)
    else:
        show_message(message, f"{kept}Saved {path}.")


def write_picture(image: QImage | QPixmap, path: str | Path) -> Path:
    """``image`` as a PNG file at ``path``, encoded in memory and written whole or not at all (`files.atomic_write`:
    a process killed meanwhile leaves no half a picture); an OSError naming ``path`` if it cannot be."""
    path = Path(path)
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if image.isNull() or not image.save(buffer, "PNG"):
        raise OSError(f"could not write {path}: the picture could not be drawn.")
    atomic_write(path, bytes(data.data()))
    return path


def show_message(label: QLabel, text: str, error: bool = False) -> None:
    """Show ``text`` in ``label``: red for an error."""
    label.setText(text)
    label.setStyleSheet("color: #c0392b;" if error else "")
    label.setVisible(True)
