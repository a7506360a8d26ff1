"""The Attention tab's export: the large map as it is shown or the head grid as a picture, and the large map's
numbers as CSV, both written by the core's `AttentionMaps` (the CLI's writers and colours) except the picture of
the view (saved through `widgets.saving`).

The functions take what they write (the maps, the map's name and head, the view's widget), never the panel."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QWidget

from ....core.inference.attention_maps import MEAN_HEAD, AttentionMaps
from ....core.names import AttentionKind, MapName
from ...widgets.saving import write_picture


def export_png(path, maps: AttentionMaps | None, view: QWidget, names: list[MapName], what: str = "view") -> Path:
    """Save the large map as it is shown ("view": a picture of ``view``, the head or the mean with its token labels
    and colour bar) or the head grid ("grid": the maps ``names`` of the kind shown, each layer's heads then their
    mean, labelled as the command line draws them, `attention_png`). Returns the path."""
    maps = _exported(maps)
    if what == "view":
        return write_picture(view.grab(), path)
    if what == "grid":
        from fatstudio.qt.widgets.attention_png import save_attention_png

        return save_attention_png(maps, path, names, with_mean=True)
    raise ValueError(f"what = {what!r}: choose 'view' or 'grid'.")


def export_csv(path, maps: AttentionMaps | None, name: MapName, head: int) -> Path:
    """Save the numbers of map ``name``'s ``head`` (the core's `AttentionMaps.head_csv`): a header "query \\ key" +
    the key tokens, then one row per query: its token and its weights, with full precision."""
    return _exported(maps).save_head(path, name, head)


def _exported(maps: AttentionMaps | None) -> AttentionMaps:
    if maps is None:
        raise ValueError("there is no attention map to export yet.")
    return maps


def export_name(kind: AttentionKind | None, layer: int, head: int) -> str:
    """The file name proposed for the map shown large (counted from 1), without its suffix."""
    return f"attention-{kind}-layer{layer + 1}-{'mean' if head == MEAN_HEAD else f'head{head + 1}'}"
