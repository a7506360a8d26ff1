"""The command line's training commands: ``fatstudio train`` (a config file, a preset, ``--resume``, ``--init-from``),
its progress on the terminal (`ProgressBar`) and what to try next, and ``fatstudio sweep``."""
from __future__ import annotations

import math
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cli_experiments import out_file, write
from .cli_interrupt import interrupt, interrupted


# ---- train -------------------------------------------------------------------------------------------
def _load_config(args):
    from .core.config import RunConfig
    from .core.runs.folder import Run
    from .core.runs.presets import preset

    if args.resume:
        if args.config or args.preset:
            raise ValueError("--resume continues a run with its own config; give only --set overrides, not a config file.")
        return Run.open(args.resume).config.with_overrides(args.set)
    if args.config and args.preset:
        raise ValueError("give either a config file or --preset, not both.")
    if args.preset:
        base = preset(args.preset).config
    elif args.config:
        if Path(args.config).is_dir() and (Path(args.config) / "meta.json").exists():
            raise ValueError(f"{args.config} is a run folder, not a config file; continue it with --resume "
                             f"{args.config} (and --out NEW to continue a copy).")
        base = RunConfig.load(args.config)
    else:
        raise ValueError("give a config file (fatstudio train CONFIG.toml), --preset NAME, or --resume RUN_DIR.")
    return base.with_overrides(args.set)


def _given(args) -> set[str] | None:
    """The ``table.key`` names the config file and ``--set`` give (what ``--init-from`` refuses to see differ from
    the source run's); None for a preset (its non-default values count as given)."""
    from .core.config import RunConfig

    if args.preset or not args.config:
        return None
    return RunConfig.given_in(args.config) | {a.partition("=")[0].strip() for a in args.set}


def _probe(args, config):
    """The probe input asked for with --probe / --probe-source, or None (the run's own, or the default)."""
    from .core.inspect.probes import ProbeInput

    if args.resume and (args.probe or args.probe_source):
        raise ValueError("a resumed run keeps the probe it started with; give no --probe.")
    return ProbeInput.asked(args.probe, args.probe_source, config.model.arch)


def cmd_train(args) -> int:
    from .core.distributed import World
    from .core.training import Control, Evaluation, Finished, Note, Prepare, Started, Steps, train

    config = _load_config(args)
    control = Control()
    world = World.from_env()  # under torchrun, rank 0 alone shows the run
    phase = ["starting"]  # what the run is doing: a Prepare event's words, then "training"

    def on_signal(signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM (a scheduler ending the job): once training, stop after the current step and
        checkpoint; before its first step (the corpus read or tokenized, the model built or compiled), end now,
        leaving no run folder behind (`train` removes the one it made)."""
        control.stop()
        if phase[0] != "training" and not world.distributed:
            interrupt(signum, frame)

    previous: dict[signal.Signals, Any] = {  # the handlers to put back (a callable, SIG_DFL, SIG_IGN or None)
        sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    bar = ProgressBar(enabled=not args.quiet and world.is_main, processes=world.size)
    show: dict[type, Callable[[Any], None]] = {  # the events a terminal shows; the others pass silently
        Prepare: bar.prepare, Note: bar.note, Started: bar.start, Steps: bar.update, Evaluation: bar.evaluation,
        Finished: bar.finish}
    run_dir = None
    try:
        if args.resume and args.out and world.is_main:  # continue a copy: the run asked for is never changed
            from .core.runs.folder import Run
            from .core.runs.targets import copy_run

            args.resume = str(copy_run(Run.open(args.resume), args.out).path)
        for ev in train(config, run_dir=args.resume or args.out, resume=bool(args.resume), control=control,
                        probe=_probe(args, config), init_from=args.init_from, given=_given(args)):
            handler = show.get(type(ev))
            if handler:
                handler(ev)
            if isinstance(ev, Prepare):
                phase[0] = ev.message
            elif isinstance(ev, Steps):
                phase[0] = "training"
            if isinstance(ev, Started):
                run_dir = ev.run_dir
            if isinstance(ev, Finished):
                hint = _next_commands(run_dir) if ev.status != "failed" and run_dir and world.is_main else None
                if hint:
                    print(hint)
                return 0 if ev.status != "failed" else 1
    except KeyboardInterrupt as e:
        kept = f"{args.resume} keeps its last checkpoint" if args.resume else "no run folder was left"
        print(f"\nfatstudio train: interrupted{f' ({e})' if str(e) else ''} while {phase[0]}; {kept}.", file=sys.stderr)
        return interrupted(e)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    return 0


def _next_commands(run_dir: str) -> str | None:
    """What to try on a trained run, for its task, with the run's probe as the text: prompt it (a line of the
    probe for generate, its line with [MASK] for fill-mask, its source for an encoder-decoder, its text to
    classify), and draw the attention maps the probe got at the last evaluation. None for a run with no
    weights."""
    from .core.inference.prompting import MASK_MARKER, model_mode
    from .core.runs.folder import Run

    run = Run.open(run_dir)
    if not run.has_checkpoint:
        return None
    probe = run.probe_input()
    mode = model_mode(run.config.model, run.config.data.task)
    lines = [line.strip() for line in (probe.text if probe else "").splitlines() if line.strip()]
    if mode == "translate":
        text = probe.source if probe else None
    elif mode == "fill_mask":
        text = next((line for line in lines if MASK_MARKER in line), f"TEXT WITH {MASK_MARKER}")
    else:
        text = lines[0] if lines else None
    where = shlex.quote(str(run.path))
    out = [f"fatstudio generate {where} --prompt {shlex.quote(text or 'TEXT')}"]
    steps = run.probe_steps()
    if steps:
        png = shlex.quote(f"{run.path.name}-step-{steps[-1]}.png")
        out.append(f"fatstudio attention {where} --step {steps[-1]} --out {png}")
    return "next: " + "\n      ".join(out)


def _duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class ProgressBar:
    """A tqdm bar redrawn in place on a terminal (steps, loss, val loss, tokens/s, the trainer's ETA), with the
    run's messages written above it; on anything else plain lines, a progress line at most every 10 s; nothing
    when not ``enabled`` (--quiet). One method per kind of trainer event it shows."""

    PLAIN_EVERY_S = 10.0

    def __init__(self, enabled: bool = True, processes: int = 1):
        self.enabled, self.tty, self.processes = enabled, sys.stderr.isatty(), processes
        self.val: float | None = None
        self.last_plain = -math.inf
        self.bar: Any = None  # the tqdm bar, from the first Steps on a terminal to Finished

    def _out(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)  # clears the bar, writes the line, redraws the bar
        else:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()

    def _numbers(self, ev) -> str:
        val = f" val {self.val:.4f}" if self.val is not None else ""
        return f"loss {ev.train_loss[-1]:.4f}{val} {ev.tokens_per_s / 1000:.1f}k tok/s ETA {_duration(ev.eta_s)}"

    def prepare(self, ev) -> None:
        self._out(ev.message if ev.message.endswith((".", "…")) else f"{ev.message}…")

    def note(self, ev) -> None:
        self._out(ev.message)

    def start(self, ev) -> None:
        where = f"{ev.device} × {self.processes} processes" if self.processes > 1 else ev.device
        self._out(f"run {ev.run_dir}: {ev.n_parameters:,} parameters on {where} in {ev.precision}, "
                  f"steps {ev.start_step}→{ev.total_steps}")

    def update(self, ev) -> None:
        if not self.enabled:
            return
        if not self.tty:
            if time.monotonic() - self.last_plain >= self.PLAIN_EVERY_S:
                self.last_plain = time.monotonic()
                self._out(f"{ev.step}/{ev.total_steps} {self._numbers(ev)}")
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=ev.total_steps, initial=ev.step, file=sys.stderr, unit="step", dynamic_ncols=True,
                            bar_format="{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}{postfix}", postfix=self._numbers(ev))
            return
        self.bar.set_postfix_str(self._numbers(ev), refresh=False)  # tqdm writes it after ", "
        self.bar.update(ev.step - self.bar.n)

    def evaluation(self, ev) -> None:
        self.val = ev.val_loss
        acc = f", accuracy {ev.accuracy:.1%}" if ev.accuracy is not None else ""
        self._out(f"step {ev.step}: train loss {ev.eval_train_loss:.4f}, val loss {ev.val_loss:.4f}{acc}")

    def finish(self, ev) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self._out(ev.said)


# ---- sweep ------------------------------------------------------------------------------------------------
def _vary(config, spec: str):
    """One ``--vary KEY=V1,V2`` (`parse_vary`), a bad one's message naming the flag."""
    from .core.training.sweep import parse_vary

    try:
        return parse_vary(config, spec)
    except ValueError as e:
        raise ValueError(f"--vary {e}") from None


def cmd_sweep(args) -> int:
    from .core.config import RunConfig
    from .core.files import cannot_make
    from .core.training.sweep import Plan, few_seeds, run_sweep, variant_label

    out = out_file(args.out, (".json", ".csv"))  # its folder too: checked now, not once every run has trained
    runs_dir = Path(args.runs_dir) if args.runs_dir else None
    if runs_dir is not None:
        problem = cannot_make(runs_dir)
        if problem:
            raise ValueError(f"--runs-dir {runs_dir} cannot hold the runs: {problem}.")
    config = RunConfig.load(args.config)
    plan = Plan(config, [_vary(config, v) for v in args.vary], args.seeds, args.budget_steps, args.budget_seconds)
    n = len(plan.variants()) * args.seeds

    def progress(sweep, done) -> None:
        got = f"{done.value:.4f} {sweep.unit}" if done.value is not None else f"missing ({done.error})"
        print(f"[{sum(len(r.values) for r in sweep.rows)}/{n}] variant {done.row + 1}, seed {done.seed}: {got}", flush=True)

    sweep = run_sweep(plan, runs_dir, progress=progress)
    write(out, sweep.to_dict(), sweep.csv)
    unit = f" {sweep.unit}" if sweep.unit else ""
    for i, r in enumerate(sweep.rows):
        mean = "n/a" if r.mean is None else f"{r.mean:.4f}{'' if r.sd is None else f' ± {r.sd:.4f}'}{unit}"
        p, df = sweep.p_value(i), sweep.df(i)
        few = f" (Welch's df ≈ {df:.1f}: too few seeds to mean much)" if df is not None and few_seeds(df) else ""
        print(f"{'baseline' if i == 0 else f'variant {i + 1}'}: {variant_label(r.variant)}: {mean} "
              f"({len(r.present)}/{len(r.values)} runs)" + ("" if p is None else f", p = {p:.3g}{few}"))
    missing = sweep.missing()
    for line in missing:
        print(f"missing: {line}", file=sys.stderr)
    print(f"wrote {out}")
    return 1 if missing and not any(r.present for r in sweep.rows) else 0
