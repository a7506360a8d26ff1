"""The Attention panel's export: the large map as it is shown or the head grid as a picture, and the large
map's numbers as CSV, both written by the core's `AttentionMaps` (the CLI's writers and colours) except the
picture of the view; and the dialogs that ask where."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QFileDialog, QLabel, QWidget

from ...core.inference.attention_maps import MEAN_HEAD, AttentionMaps, map_name
from ...core.runs.targets import check_output

if TYPE_CHECKING:
    from .attention import AttentionPanel


def export_png(panel: AttentionPanel, path, what: str = "view") -> Path:
    """Save the large map as it is shown ("view": a picture of the head, or the mean, with its token labels
    and colour bar) or the head grid ("grid": every layer × head of the kind shown, then the mean over
    heads, labelled as the command line draws them, `attention_png`). Returns the path."""
    maps = maps_to_export(panel)
    if what == "view":
        path = Path(path)
        if not panel.attentionView.grab().save(str(path), "PNG"):
            raise OSError(f"could not write {path}.")
        return path
    if what == "grid":
        from fatstudio.qt.widgets.attention_png import save_attention_png

        kind = panel._shown()[1]
        return save_attention_png(maps, path, [map_name(kind, l) for l in panel.layers()], with_mean=True)
    raise ValueError(f"what = {what!r}: choose 'view' or 'grid'.")


def export_csv(panel: AttentionPanel, path) -> Path:
    """Save the numbers of the large map (the core's `AttentionMaps.head_csv`): a header "query \\ key" +
    the key tokens, then one row per query: its token and its weights, with full precision."""
    return maps_to_export(panel).save_head(path, panel.current_name(), panel.head)


def maps_to_export(panel: AttentionPanel) -> AttentionMaps:
    if panel.maps is None:
        raise ValueError("there is no attention map to export yet.")
    return panel.maps


def default_name(panel: AttentionPanel) -> str:
    head = "mean" if panel.head == MEAN_HEAD else f"head{panel.head + 1}"
    return f"attention-{panel.kind}-layer{panel.layer + 1}-{head}"


def export_png_dialog(panel: AttentionPanel) -> None:
    export_dialog(panel, "PNG image (*.png)", ".png", panel.export_png)


def export_csv_dialog(panel: AttentionPanel) -> None:
    export_dialog(panel, "CSV table (*.csv)", ".csv", panel.export_csv)


def export_dialog(panel: AttentionPanel, filt: str, suffix: str, fn) -> None:
    if panel.maps is not None:
        save_with_dialog(panel, default_name(panel), filt, suffix, fn, panel.messageLabel)


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


def show_message(label: QLabel, text: str, error: bool = False) -> None:
    """Show ``text`` in ``label``: red for an error."""
    label.setText(text)
    label.setStyleSheet("color: #c0392b;" if error else "")
    label.setVisible(True)
