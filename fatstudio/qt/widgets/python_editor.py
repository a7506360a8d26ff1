"""A plain-text editor for Python with Pygments' highlighting (`PythonHighlighter`, a QSyntaxHighlighter): a line
is lexed on its own, a triple-quoted string carried from line to line in the block state (a docstring spans
lines), in the colours of Pygments' "default" style. Tab inserts four spaces; Return keeps the indentation."""
from __future__ import annotations

from pygments.lexers import PythonLexer
from pygments.styles import get_style_by_name
from pygments.token import _TokenType
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QKeyEvent, QSyntaxHighlighter, QTextCharFormat
from PySide6.QtWidgets import QPlainTextEdit

QUOTES = '"""'
IN_STRING = 1  # the block state of a line that ends inside a triple-quoted string


class PythonHighlighter(QSyntaxHighlighter):
    def __init__(self, document) -> None:
        super().__init__(document)
        self.lexer = PythonLexer(stripnl=False, ensurenl=False)
        self.style = get_style_by_name("default")
        self.formats: dict[_TokenType, QTextCharFormat] = {}

    def _format(self, kind: _TokenType) -> QTextCharFormat:
        if kind not in self.formats:
            style = self.style.style_for_token(kind)
            f = QTextCharFormat()
            if style["color"]:
                f.setForeground(QColor(f"#{style['color']}"))
            if style["bold"]:
                f.setFontWeight(QFont.Weight.Bold)
            f.setFontItalic(bool(style["italic"]))
            self.formats[kind] = f
        return self.formats[kind]

    def highlightBlock(self, text: str) -> None:
        carried = self.previousBlockState() == IN_STRING
        inside = carried != (text.count(QUOTES) % 2 == 1)
        self.setCurrentBlockState(IN_STRING if inside else 0)
        prefix = QUOTES if carried else ""
        at = -len(prefix)
        for kind, value in self.lexer.get_tokens(prefix + text + (QUOTES if inside else "")):
            start, end = max(at, 0), min(at + len(value), len(text))
            if end > start:
                self.setFormat(start, end - start, self._format(kind))
            at += len(value)


class PythonEditor(QPlainTextEdit):
    """A fixed-width editor whose text is highlighted as Python (``highlighter``)."""

    def __init__(self, parent=None, **kwargs) -> None:
        super().__init__(parent, **kwargs)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setTabStopDistance(4 * self.fontMetrics().horizontalAdvance(" "))
        self.highlighter = PythonHighlighter(self.document())

    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.key() == Qt.Key.Key_Tab and not self.isReadOnly():
            self.insertPlainText("    ")
            return
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not self.isReadOnly():
            line = self.textCursor().block().text()
            indent = line[:len(line) - len(line.lstrip(" "))] + ("    " if line.rstrip().endswith(":") else "")
            self.insertPlainText("\n" + indent)
            return
        super().keyPressEvent(e)
