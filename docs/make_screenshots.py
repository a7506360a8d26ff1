"""Regenerate the guide's screenshots (docs/images/) from real runs, offscreen.

    QT_QPA_PLATFORM=offscreen python docs/make_screenshots.py [--only NAME ...] [--steps-scale 1.0] [--out DIR]

Each scene trains the run it needs (`fatstudio train --preset …`, once per preset and steps, kept in
build/screenshot-runs so a second call reuses them), opens it in the main window at 1440×900, shows its tab,
presses the buttons it names (by objectName, as the guide does) and saves ``window.grab()``. ``--steps-scale``
below 1 trains shorter runs, to check the scenes quickly (the pictures then show undertrained models). The
screenshots that need hand-set states (a knock-out chosen, a patching pair, the attribution graph) are listed by
``--list`` as made by hand, with the steps the guide's caption gives."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "build" / "screenshot-runs"


@dataclass(frozen=True)
class Scene:
    """``name``.png: the ``preset`` trained for ``steps`` (more ``sets``), its ``tab`` shown, then ``actions``:
    (objectName, "click") or (objectName, text to type), each waited for."""

    name: str
    preset: str
    steps: int
    tab: str
    actions: tuple[tuple[str, str], ...] = ()
    sets: tuple[str, ...] = field(default=())


SCENES = [
    Scene("screenshot", "gpt-char", 2000, "Training"),
    Scene("screenshot-diagnostics", "gpt-char", 2000, "Training", (("diagnosticsView", "show"),)),
    Scene("screenshot-attention", "gpt-char", 2000, "Attention",
          (("promptEdit", "def "), ("generateButton", "click"), ("attentionSourceText", "click"))),
    Scene("screenshot-score", "gpt-induction", 1500, "Prompt",
          (("promptEdit", "qwertyuiopasqwertyuiopas"), ("scoreButton", "click"))),
    Scene("screenshot-induction", "gpt-induction", 1500, "Attention", (("attentionSourceProbe", "click"),)),
    Scene("screenshot-seq2seq-cross", "edt-reverse", 750, "Attention",
          (("promptEdit", "abcdefgh"), ("generateButton", "click"), ("attentionSourceText", "click"))),
    Scene("screenshot-grokking", "grokking", 1000, "Training"),
    Scene("screenshot-paper", "gpt-char", 2000, "Paper", (("paperForwardButton", "click"),)),
    Scene("screenshot-token-loss", "gpt-char", 1500, "Token loss", (("tokenLossScoreButton", "click"),),
          ("data.corpus=$TINYSHAKESPEARE",)),
    Scene("screenshot-exercises", "gpt-char", 2000, "Exercises"),
    Scene("screenshot-experiments", "gpt-char", 2000, "Experiments"),
]
BY_HAND = {
    "screenshot-probe-first / -probe-last": "gpt-char with --set train.steps=600 --set train.eval_interval=60; "
                                            "the Attention tab's probe slider at steps 60 and 600",
    "screenshot-ablation / -head-ablation": "gpt-induction, 1,500 steps; the Attention tab's Knock-out table, "
                                            "mean ablation, then the induction head knocked out",
    "screenshot-patching": "gpt-induction; the Attention tab's Patching with a clean and a corrupted prompt",
    "screenshot-lens": "gpt-char; the lens at steps 50, 300 and 900 (the probe slider)",
    "screenshot-walkthrough": "gpt-char; Paper → Walkthrough → Walk through, then Next to MHAttention's softmax",
    "screenshot-tokenizer-lab": "python-stdlib with three 300-step runs (char, bpe 1024, word 4096); "
                                "Corpus → Compare tokenizers…",
    "screenshot-features / -features-graph": "gpt-char, 2,000 steps, a transcoder per MLP and an SAE on "
                                             "self/1/resid_post; the Features tab's list and feature 179's "
                                             "dashboard, then its attribution graph with a feature zeroed",
    "screenshot-attribution-graph": "gpt-char, 2,000 steps, a transcoder per layer (fatstudio features); "
                                    "the Attention tab's attribution graph of `import os↵import sys↵↵def main(a`",
}


def train(scene: Scene, scale: float) -> Path | None:
    """The scene's run, trained once (a finished run of the same preset, steps and settings is reused); None when
    a file it needs is not named ($TINYSHAKESPEARE: the path of tinyshakespeare.txt, which is not shipped)."""
    steps = max(10, int(scene.steps * scale))
    sets = [f"train.steps={steps}", *(os.path.expandvars(s) for s in scene.sets)]
    if any("$" in s for s in sets):
        print(f"{scene.name}: skipped, set {' '.join(s for s in sets if '$' in s)} first", file=sys.stderr)
        return None
    out = RUNS / "-".join([scene.preset, str(steps), *(Path(s).name.replace("=", "_").replace(".", "_") for s in sets[1:])])
    if not (out / "meta.json").is_file() or '"finished"' not in (out / "meta.json").read_text(encoding="utf-8"):
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "fatstudio", "train", "--preset", scene.preset, "--quiet", "--out", str(out)]
        if subprocess.run([*command, *(a for s in sets for a in ("--set", s))]).returncode != 0:
            raise SystemExit(f"{scene.name}: training its run failed (above)")
    return out


def shoot(scenes: list[Scene], scale: float, out: Path) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("FATSTUDIO_STATE", str(RUNS / "state.ini"))  # not the user's own window state
    from PySide6.QtWidgets import QAbstractButton, QApplication, QLineEdit, QPlainTextEdit, QTextEdit, QWidget

    app = QApplication.instance() or QApplication([])
    from fatstudio.app import MainWindow
    from fatstudio.core.runs.folder import Run

    def settle(window, seconds: float = 600) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            if window.workspace.jobs.idle and not window.runs_loading:
                break
            time.sleep(0.02)
        for _ in range(30):  # the layouts and paints the results posted
            app.processEvents()
            time.sleep(0.01)

    for scene in scenes:
        run = train(scene, scale)
        if run is None:
            continue
        window = MainWindow()
        window.confirm_close = lambda: True
        window.resize(1440, 900)
        window.show()
        settle(window)
        window.open_run(Run.open(run))
        settle(window)
        tabs = window.viewTabs
        tabs.setCurrentIndex([tabs.tabText(i) for i in range(tabs.count())].index(scene.tab))
        settle(window)
        for name, action in scene.actions:
            widget = window.findChild(QWidget, name)
            if widget is None:
                raise SystemExit(f"{scene.name}: no widget named {name!r}")
            if action == "click" and isinstance(widget, QAbstractButton):
                widget.click()
            elif action == "show":
                parent = widget.parentWidget()
                while parent is not None and not hasattr(parent, "setCurrentWidget"):
                    parent = parent.parentWidget()
                if parent is not None:
                    parent.setCurrentWidget(widget)
            elif isinstance(widget, (QLineEdit, QPlainTextEdit, QTextEdit)):
                widget.setPlainText(action) if not isinstance(widget, QLineEdit) else widget.setText(action)
            settle(window)
        path = out / f"{scene.name}.png"
        window.grab().save(str(path))
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {run.name}")
        window.close()
        window.deleteLater()
        app.processEvents()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help="the scenes to make (names without .png); default: all")
    p.add_argument("--steps-scale", type=float, default=1.0, help="train each run for this share of its steps")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "images")
    p.add_argument("--list", action="store_true", help="list the scenes, and those made by hand")
    args = p.parse_args()
    if args.list:
        for s in SCENES:
            print(f"{s.name}.png: {s.preset}, {s.steps} steps, the {s.tab} tab")
        for name, how in BY_HAND.items():
            print(f"{name} (by hand): {how}")
        return
    scenes = [s for s in SCENES if not args.only or s.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    shoot(scenes, args.steps_scale, args.out)


if __name__ == "__main__":
    main()
