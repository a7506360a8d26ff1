"""What Diagnostics says on every shipped preset trained at its own settings, as the app feeds it.

    OMP_NUM_THREADS=1 python bench/diagnose_presets.py [PRESET_KEY ...] [--save tests/data/preset-runs]

Each preset trains on the CPU (`training.train`, the trainer the GUI runs) at the preset's settings. Its
events are fed to `diagnostics.Diagnosis` the way the main window feeds them (each Steps window's rows, each
evaluation's numbers joining its step's row, each probe's head findings), and every line the Diagnostics tab
would show after each evaluation is printed, with the warnings marked "!". ``--save DIR`` writes what
`tests/core/test_diagnostics.py` replays: ``DIR/<key>.npz`` with the per-step train loss and gradient norm
(float32), the evaluations (step, train loss, validation loss, accuracy), the run's settings, unigram
entropy and split gap (meta.json's ``split_gap``), and ``DIR/<key>.safetensors``, the run's last probe
(the maps the trainer saved, float16).
"""
from __future__ import annotations

import argparse
import json
import pickle
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def train_preset(preset, probes: Path) -> list:
    """Train ``preset`` on the CPU at its own settings; its events (each probe file copied into ``probes``)."""
    from dataclasses import replace

    from fatstudio.core import training

    cfg = preset.config.with_overrides(["train.device=cpu"])
    events = []
    probes.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as root:
        for ev in training.train(cfg, runs_root=Path(root)):
            if isinstance(ev, training.Probe):
                path = probes / f"{preset.key}-step-{ev.step}.safetensors"
                shutil.copy(ev.path, path)
                ev = replace(ev, path=str(path))
            if isinstance(ev, (training.Started, training.Steps, training.Evaluation, training.Probe,
                               training.Finished)):
                events.append(ev)
    return events


def replay(events) -> tuple[list[str], dict]:
    """Feed ``events`` to `diagnostics.Diagnosis` as the main window does: the lines shown after each probe
    (warnings marked "!"), and what ``--save`` writes."""
    from fatstudio.core import training
    from fatstudio.core.inspect.probes import load_probe_file
    from fatstudio.core.runs.presets import expected_findings
    from fatstudio.core.training import diagnostics

    diagnosis = diagnostics.Diagnosis()
    config: dict = {}
    rows: list[dict] = []
    evals: list[tuple[int, float, float, float]] = []
    shown: list[str] = []
    last_probe = None
    for ev in events:
        if isinstance(ev, training.Started):
            config = ev.config.to_dict()
            train = config["train"]
            diagnosis = diagnostics.Diagnosis(float(train["grad_clip"]), ev.unigram_entropy, int(train["warmup"]),
                                              ev.split_gap, expected_findings(ev.config))  # as the app does
        elif isinstance(ev, training.Steps):
            new = [{"step": s, "train_loss": x, "lr": lr, "grad_norm": g}
                   for s, x, lr, g in zip(ev.steps, ev.train_loss, ev.lr, ev.grad_norm)]
            rows.extend(new)
            diagnosis(new)
        elif isinstance(ev, training.Evaluation):
            row = next((r for r in reversed(rows) if r["step"] == ev.step), None)
            if row is None:
                row = {"step": ev.step}
                rows.append(row)
                diagnosis([row])
            row.update(eval_train_loss=ev.eval_train_loss, val_loss=ev.val_loss, accuracy=ev.accuracy)
            evals.append((ev.step, ev.eval_train_loss, ev.val_loss, np.nan if ev.accuracy is None else ev.accuracy))
        elif isinstance(ev, training.Probe):
            last_probe = ev.path  # its findings by the rules of today, not those of when it was trained
            found = diagnosis([], (ev.step, diagnostics.head_findings(load_probe_file(ev.path), ev.step)))
            acc = f", accuracy {evals[-1][3]:.1%}" if evals and np.isfinite(evals[-1][3]) else ""
            shown.append(f"  step {ev.step}: val {evals[-1][2]:.4f}{acc}" if evals else f"  step {ev.step}")
            shown.extend(f"    {'!' if f.warning else ' '} {f.line}" for f in found)
            if summary := diagnosis.summary(found):
                shown.append(f"      {summary}")
        elif isinstance(ev, training.Finished):
            shown.append(f"  {ev.status}: {ev.message}")
    steps = [r for r in rows if "train_loss" in r]
    data = dict(step=np.array([r["step"] for r in steps], np.int32),
                train_loss=np.array([r["train_loss"] for r in steps], np.float32),
                grad_norm=np.array([np.nan if r["grad_norm"] is None else r["grad_norm"] for r in steps], np.float32),
                evals=np.array(evals, np.float64),
                settings=json.dumps({"config": config, "unigram": diagnosis.unigram, "split": diagnosis.split}))
    return shown, {"arrays": data, "probe": last_probe}


def main() -> None:
    from fatstudio.core.runs.presets import load_presets

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("keys", nargs="*", help="preset keys (default: all)")
    ap.add_argument("--save", type=Path, help="write each run's rows and last probe here")
    ap.add_argument("--events", type=Path, default=Path(tempfile.gettempdir()) / "fatstudio-preset-events",
                    help="keep each run's events and probes here; a preset whose events are there is not trained again")
    a = ap.parse_args()
    for preset in load_presets():
        if a.keys and preset.key not in a.keys:
            continue
        print(f"{preset.key} ({preset.name})", flush=True)
        kept = a.events / f"{preset.key}.pickle"
        if kept.exists():
            events = pickle.loads(kept.read_bytes())
        else:
            t0 = time.perf_counter()
            events = train_preset(preset, a.events)
            kept.write_bytes(pickle.dumps(events))
            print(f"  trained in {time.perf_counter() - t0:.0f} s", flush=True)
        shown, saved = replay(events)
        for line in shown:
            print(line, flush=True)
        if a.save is not None:
            a.save.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(a.save / f"{preset.key}.npz", **saved["arrays"])
            if saved["probe"] is not None:
                shutil.copyfile(saved["probe"], a.save / f"{preset.key}.safetensors")


if __name__ == "__main__":
    main()
