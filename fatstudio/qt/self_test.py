"""``fatstudio --self-test``: does the app work here? (an installed copy, or the standalone bundle)

It opens the main window offscreen, loads the default preset's built-in corpus in the Corpus panel, trains a
tiny model for a few steps with the Train button (the panels' settings, the training worker), generates text
in the Prompt panel and draws that text's attention maps in the Attention panel: the path a user's clicks
take. It prints one line per thing it did, with its numbers (ASCII only: a bundle may run under any locale),
and returns 0; on a failure it prints what failed and returns 1.

Nothing is left behind and nothing of the user's is touched: runs go to a temporary folder, and the window's
remembered state (QSettings, see `fatstudio.qt.state`) and torch's compile cache to temporary places, removed
at the end.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from fatstudio.core.names import MapName
from fatstudio.core.records import TRAIN_LOSS, VAL_LOSS
from fatstudio.core.temporary import scratch_folder

STEPS = 30
MODEL = {"L": 1, "H": 2, "d_e": 32, "d_mlp": 64, "l_max": 32}
TRAIN = {"steps": STEPS, "batch_size": 8, "eval_interval": 10, "eval_iters": 2, "warmup": 2,
         "checkpoint_interval": 1000, "sample_tokens": 16}
PROMPT = "def "
TOKENS = 24
WAIT_S = 120.0  # the longest any one step may take (a loaded, slow machine) before it counts as failed

if TYPE_CHECKING:
    from .main_window import MainWindow


class SelfTestFailure(Exception):
    """A check that did not hold (its message says which)."""


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Process Qt events until ``condition()`` holds; SelfTestFailure after ``timeout_s``."""
    from PySide6.QtCore import QCoreApplication

    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            raise SelfTestFailure(f"{what} did not happen within {timeout_s:.0f} s")
        QCoreApplication.processEvents()
        time.sleep(0.005)


@contextmanager
def _quiet_offscreen() -> Iterator[None]:
    """Drop the offscreen platform's "does not support propagateSizeHints()" warnings (one a window shown);
    other Qt messages go where they went."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(mode, context, message: str) -> None:
        if "propagateSizeHints" in message:
            return
        if previous is not None:
            previous(mode, context, message)
        else:
            print(message, file=sys.stderr)

    previous = qInstallMessageHandler(handler)
    try:
        yield
    finally:
        qInstallMessageHandler(previous)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SelfTestFailure(message)


def _set_number(field, value: float) -> None:
    """Type ``value`` into a number field of a settings form."""
    from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox

    if isinstance(field, QSpinBox):
        field.setValue(int(value))
    elif isinstance(field, QDoubleSpinBox):
        field.setValue(float(value))
    else:
        raise SelfTestFailure(f"the setting {field.objectName()!r} is no number field")


class _SelfTest:
    def __init__(self, out: Callable[[str], None], folder: Path):
        self.out = out
        self.folder = folder
        self.window: MainWindow | None = None
        self.stage = "starting"

    def _open(self) -> MainWindow:
        """The window the self-test opened (a stage that needs it runs after `open_window`)."""
        if self.window is None:
            raise SelfTestFailure("the window is not open")
        return self.window

    def say(self, what: str, started: float, text: str) -> None:
        self.out(f"self-test: {what:<9} {text}  ({time.monotonic() - started:.1f} s)")

    def run(self) -> None:
        steps = (("opening the window", self.open_window), ("loading the default preset's corpus", self.load_corpus),
                 ("training", self.train), ("generating text", self.generate),
                 ("drawing the attention maps", self.draw_attention), ("closing the window", self.close))
        for stage, step in steps:
            self.stage = stage
            step()

    def open_window(self) -> None:
        t = time.monotonic()
        from PySide6.QtGui import QGuiApplication
        from PySide6.QtWidgets import QApplication

        from .app import configure
        from .gc import MainThreadCollector
        from .main_window import MainWindow

        app = QApplication.instance()
        if not isinstance(app, QApplication):  # none yet
            app = QApplication([sys.argv[0] if sys.argv else "fatstudio"])
        configure(app)
        icon = app.windowIcon()
        _check(not icon.isNull() and bool(icon.availableSizes()), "the application icon (resources/fatstudio.png) "
               "was not found")
        if app.findChild(MainThreadCollector) is None:  # as the app does: collect in the GUI thread only
            MainThreadCollector(app)
        w = self.window = MainWindow(runs_root=self.folder / "runs")
        w.confirm_close = lambda: True
        w.show()
        _wait(w.isVisible, "showing the window")
        size = max(icon.availableSizes(), key=lambda s: s.width())
        self.say("window", t, f"opened on Qt platform {QGuiApplication.platformName()!r}, {len(w.presets)} presets, "
                 f"icon {size.width()}x{size.height()}")

    def load_corpus(self) -> None:
        t = time.monotonic()
        w = self._open()
        _check(bool(w.presets), "no presets were found")
        preset = w.presets[0]
        _check(w.model_panel.preset_key() == preset.key,
               f"the window did not start with the default preset {preset.key!r}")
        panel = w.corpus_panel
        _wait(lambda: panel.corpus.prepared is not None or (panel.info is None and not panel.loading and bool(panel.error)),
              "loading the corpus")
        _check(panel.corpus.prepared is not None, f"the corpus {panel.spec!r} did not load: {panel.error}")
        info = panel.info
        if info is None:
            raise SelfTestFailure(f"the corpus {panel.spec!r} has no preview")
        self.say("corpus", t, f"{info.spec}: {info.stats.get('chars', 0):,} characters, "
                 f"{info.tokenizer} tokenizer N_V = {info.vocab_size} (preset {preset.key})")

    def train(self) -> None:
        t = time.monotonic()
        w = self._open()
        for name, value in MODEL.items():
            _set_number(w.model_panel.fields[name], value)
        for name, value in TRAIN.items():
            _set_number(w.train_panel.fields[name], value)
        _wait(lambda: w.workspace.prepared is not None, "preparing the corpus for the new settings")
        _check(w.train_view.trainButton.isEnabled(), f"the Train button is disabled: {w.validation_error}")
        w.train_view.trainButton.click()
        _wait(lambda: w.state == "idle" and w.job is None, "training")
        _check(w.last_status == "finished", f"training ended {w.last_status}: {w.last_error}")
        if w.run_dir is None:
            raise SelfTestFailure("the finished run has no folder")
        rows = [json.loads(line) for line in (Path(w.run_dir) / "metrics.jsonl").read_text().splitlines() if line]
        losses = [r[TRAIN_LOSS] for r in rows if r.get(TRAIN_LOSS) is not None]
        _check(len(losses) == STEPS and w.plots.n_points() == STEPS,
               f"expected {STEPS} steps, the run has {len(losses)} and the plot {w.plots.n_points()}")
        val = [r[VAL_LOSS] for r in rows if r.get(VAL_LOSS) is not None]
        arch = w.current_config().model.arch
        self.say("train", t, f"{STEPS} steps of {arch} (L={MODEL['L']}, H={MODEL['H']}, d_e={MODEL['d_e']}): "
                 f"loss {losses[0]:.3f} -> {losses[-1]:.3f}" + (f", val loss {val[-1]:.3f}" if val else ""))

    def generate(self) -> None:
        t = time.monotonic()
        w = self._open()
        _wait(lambda: w.loaded_model is not None, "loading the trained model into the Prompt panel")
        p = w.prompt_panel
        _wait(lambda: p.loaded is not None, "the Prompt panel receiving the model")
        p.promptEdit.setPlainText(PROMPT)
        p.tokensSpin.setValue(TOKENS)
        p.seedSpin.setValue(0)
        status: list[str] = []
        p.runFinished.connect(status.append)
        _check(p.run(), f"the Prompt panel did not start: {p.messageLabel.text()}")
        _wait(lambda: bool(status) and not p.is_running(), "generating")
        _check(status[0] == "finished", f"generation ended {status[0]}: {p.messageLabel.text()}")
        n = p.outputView.token_count()
        _check(n == TOKENS, f"asked for {TOKENS} tokens, got {n}")
        self.say("generate", t, f"{n} tokens after {PROMPT!r}: {ascii(p.output_text()[:40])}")

    def draw_attention(self) -> None:
        t = time.monotonic()
        a = self._open().attention_panel
        _wait(lambda: a.maps is not None, "the attention maps of the generated text")
        layers = a.layers()
        heads = sum(a.maps.n_heads(MapName(a.kind, l)) for l in layers)
        _check(heads == MODEL["L"] * MODEL["H"], f"expected {MODEL['L'] * MODEL['H']} heads, the maps have {heads}")
        drawn = [item for item in a.headGrid.image_items() if item.image is not None]
        _check(len(drawn) >= heads, f"the head grid drew {len(drawn)} maps of {heads} heads")
        T = a.attentionView.matrix.shape
        self.say("attention", t, f"{heads} heads in {len(layers)} layer(s) drawn (+ their mean), "
                 f"large map {T[0]}x{T[1]} tokens")

    def close(self) -> None:
        from PySide6.QtCore import QCoreApplication

        w, self.window = self.window, None
        if w is None:
            return
        QCoreApplication.processEvents()  # what the window started on its own (its first corpus load) starts now
        if w.job is not None:
            w.job.stop()
            _wait(lambda: w.job is None, "stopping the training")
        w.close()
        w.workspace.jobs.wait(WAIT_S)  # nothing may still write into the temporary folder
        QCoreApplication.processEvents()  # their results, delivered to the closed window
        w.deleteLater()


def _print(line: str) -> None:
    """print, with what the terminal's encoding lacks escaped (a message may quote any text)."""
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    print(line.encode(encoding, "backslashreplace").decode(encoding), flush=True)


def run(out: Callable[[str], None] = _print) -> int:
    """Run the self-test, printing with ``out``; 0 when everything worked, 1 otherwise."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before the QApplication is made
    started = time.monotonic()
    with scratch_folder("self-test") as tmp:  # removed by the next one if this process is killed
        folder = Path(tmp)
        with _environment(FATSTUDIO_RUNS=str(folder / "runs"), FATSTUDIO_STATE=str(folder / "state.ini"),
                          TORCHINDUCTOR_CACHE_DIR=str(folder / "torchinductor")), _quiet_offscreen():
            test = _SelfTest(out, folder)
            try:
                test.run()
            except Exception as e:
                out(f"self-test: FAILED while {test.stage}: {e if isinstance(e, SelfTestFailure) else repr(e)}")
                if not isinstance(e, SelfTestFailure):
                    traceback.print_exc(file=sys.stderr)
                try:
                    test.close()
                except Exception as e2:  # the first failure is the one to report
                    out(f"self-test: (and closing the window failed too: {e2!r})")
                return 1
    out(f"self-test: passed in {time.monotonic() - started:.1f} s")
    return 0
