"""The command line: ``fatstudio`` (the app), ``train``, ``sweep``, ``generate``, ``attention``, ``export``, ``cache``,
``import``, and the experiments on a trained run: ``ablate``, ``patch``, ``lens``, ``token-loss``.

Errors print one or two lines and exit non-zero; ``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterable
from itertools import chain
from pathlib import Path
from typing import Any

from .cli_experiments import cmd_ablate, cmd_lens, cmd_patch, cmd_token_loss, intervention_parsers, loaded_model, out_file, write
from .cli_options import EXIT_ERROR, Parser, number, whole

MAX_TOKENS = 1_000_000  # generate --tokens: at most (the text generated is held, a token at a time)
RANK_WAIT_S = 5.0  # how long a process other than torchrun's rank 0 waits before it says an error itself


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="fatstudio", description="A playground for 'Formal Algorithms for Transformers'. "
                                "With no command, opens the desktop app.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--self-test", action="store_true", help="check that the app works here (offscreen: train, "
                   "generate, draw attention for a tiny model; prints what it did) and exit")
    sub = p.add_subparsers(dest="command")

    t = sub.add_parser("train", help="train from a TOML config file (or a preset), or resume a run")
    t.add_argument("config", nargs="?", help="CONFIG.toml with [model], [data], [train] tables")
    t.add_argument("--preset", help="start from a built-in preset instead of a file (e.g. gpt-char)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key, e.g. model.L=6")
    t.add_argument("--out", help="the run folder to create (default: a new folder in the runs directory); with "
                   "--resume, a copy of RUN_DIR is made there and continued, and RUN_DIR is left as it is")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR from its last checkpoint (in place, or in "
                   "a copy at --out)")
    t.add_argument("--init-from", metavar="RUN_DIR", help="a new run starting from RUN_DIR's weights and tokenizer "
                   "(an imported or earlier run), with its model settings; CONFIG gives the corpus and training")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--probe", metavar="TEXT", help="the input whose attention maps are saved at every evaluation "
                   "(text with [MASK] for BERT's masked LM; an encoder-decoder's target, with --probe-source); "
                   "default: one from the validation split")
    t.add_argument("--probe-source", metavar="TEXT", help="an encoder-decoder's probe: the source its encoder reads")

    g = sub.add_parser("generate", help="prompt a trained run (DInference, EDInference, fill-mask, classify)")
    g.add_argument("run_dir")
    g.add_argument("--prompt", required=True, help="the prompt (the source text for seq2seq; text with [MASK] for BERT)")
    g.add_argument("--tokens", type=whole(0, MAX_TOKENS), default=200, help="ℓ_gen, tokens to generate")
    g.add_argument("--temperature", type=number(0, note=" (0: greedy)"), default=1.0, help="τ; 0 = greedy")
    g.add_argument("--top-k", type=whole(0, note=" (0: off)"), default=0, help="keep the k most likely tokens (0 = off)")
    g.add_argument("--top-p", type=number(0, 1, lo_open=True, note=" (1: off)"), default=1.0,
                   help="nucleus sampling: keep the smallest set with mass ≥ p")
    g.add_argument("--seed", type=whole(0), default=None)
    g.add_argument("--compile", action="store_true",
                   help="compile the decode step of this model's shape first, if no earlier compile left it in the "
                        "cache folder (once per shape; ~40 s for the recipe's model on a CPU): each token then takes "
                        "~2x less time, here and in every later generate of that shape, though a short command, "
                        "mostly Python and torch starting, gains less (gpt and gopher, not with relative positions)")

    a = sub.add_parser("attention", help="export the attention maps of one forward pass, or the probe maps "
                       "saved at an evaluation step (--step)")
    a.add_argument("run_dir")
    a.add_argument("--prompt", help="the text (the decoder's text for seq2seq)")
    a.add_argument("--source", help="the source text (encoder-decoder runs)")
    a.add_argument("--step", type=whole(0), help="write the run's probe maps saved at evaluation step N instead (and "
                   "print that step's head scores)")
    a.add_argument("--out", required=True, help="FILE.json, FILE.npz, FILE.png (every layer × head, labelled) "
                   "or FILE.csv")

    intervention_parsers(sub)

    sw = sub.add_parser("sweep", help="train every combination of some keys' values for N seeds, each run its own "
                        "process, and compare each variant's validation bits per byte (bits per token where there are no bytes "
                        "to count: modadd, seq2seq, classification) with the baseline's")
    sw.add_argument("config", help="CONFIG.toml with [model], [data], [train] tables (train.seed: the first seed)")
    sw.add_argument("--vary", action="append", required=True, metavar="KEY=V1,V2",
                    help="a key and its values, the first the baseline's (e.g. train.optimizer=adamw,muon); repeatable")
    sw.add_argument("--seeds", type=whole(1), required=True, metavar="N", help="runs per variant (seeds train.seed, +1, …)")
    budget = sw.add_mutually_exclusive_group()
    budget.add_argument("--budget-steps", type=whole(1), metavar="N", help="train.steps of every run")
    budget.add_argument("--budget-seconds", type=number(0, lo_open=True), metavar="S", help="as many steps as fit in "
                        "S seconds of training here, timed per variant (its schedule ends there)")
    sw.add_argument("--runs-dir", metavar="DIR", help="where the run folders go (default: the runs directory)")
    sw.add_argument("--out", required=True, help="FILE.json or FILE.csv")

    c = sub.add_parser("cache", help="the token files of large corpora and the compiled decode steps: where they "
                       "are and how much they hold (both bounded together by FATSTUDIO_CACHE_MB; the least recently "
                       "used go first)")
    c.add_argument("--clear", action="store_true", help="remove every token file and compiled decode step (each "
                   "is made again when needed)")

    e = sub.add_parser("export", help="write a run as a Hugging Face transformers folder (GPT-2 or Llama)")
    e.add_argument("run_dir")
    e.add_argument("--format", required=True, choices=["hf"], help="hf: config.json, model.safetensors and the "
                   "tokenizer files that AutoModelForCausalLM and AutoTokenizer load")
    e.add_argument("--out", required=True, metavar="DIR", help="the folder to create (new or empty)")

    i = sub.add_parser("import", help="open a Hugging Face transformers checkpoint (GPT-2, Llama-style, BERT) as a run")
    i.add_argument("source", help="a folder that transformers wrote, or a Hub id (e.g. gpt2) when huggingface_hub is "
                   "installed (HF_HUB_OFFLINE=1: from its cache only)")
    i.add_argument("--out", required=True, metavar="RUN_DIR", help="the run folder to create (new or empty)")
    i.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the weights' type in the "
                   "run's file (bfloat16: half the file; the model is float32 in memory either way)")
    for command in sub.choices.values():
        command.add_argument("--force-memory", action="store_true", help="build the model even where its "
                             "estimated memory exceeds what is free (also FATSTUDIO_IGNORE_MEMORY=1)")
    return p


def _interrupted(e: KeyboardInterrupt) -> int:
    """The exit code of an interrupted command: 128 + the signal."""
    return 143 if str(e) == "SIGTERM" else 130


def _interrupt(signum: int, _frame: Any) -> None:
    """SIGTERM ends a command as Ctrl-C does: a KeyboardInterrupt, so that what it was writing is removed."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    program = argv is None  # the process itself, not a caller in Python
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    from .core import environment
    from .core.children import watch_parent

    try:
        environment.check()  # every variable, before any work (the app's too)
    except ValueError as e:
        _say_error(args.command, str(e))
        return EXIT_ERROR
    watch_parent()  # a sweep's run: it ends with the sweep
    if args.self_test:
        from .qt.self_test import run as self_test
        return self_test()
    if args.command is None:
        from .qt.app import main as app_main
        return _exiting(app_main([]), program)
    if args.force_memory:
        from .core.memory import IGNORE_ENV

        os.environ[IGNORE_ENV] = "1"
    if program and args.command not in ("cache", "sweep"):  # the others' work imports torch
        _import_torch()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        code = _command(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _exiting(code, program)


def _exiting(code: int, program: bool) -> int:
    """``code``, the process about to end (``program``) with every object made so far frozen: the interpreter's
    collections at exit would walk them all, torch's included: ~0.5 s for a command, seconds after a large corpus
    was read, ~1 s for the app after a short session (bench/quit_time.py)."""
    if program:
        gc.freeze()
    return code


def _import_torch() -> None:
    """Import torch with the collector paused, and freeze what it made: ~370 collections walked its objects
    during the import (~0.14 s of a command's start), and every full collection after it would again."""
    gc.disable()
    try:
        import torch  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def _command(args) -> int:
    try:
        return {"train": cmd_train, "generate": cmd_generate, "attention": cmd_attention,
                "export": cmd_export, "import": cmd_import, "ablate": cmd_ablate, "patch": cmd_patch, "lens": cmd_lens,
                "token-loss": cmd_token_loss, "sweep": cmd_sweep, "cache": cmd_cache}[args.command](args)
    except Exception as e:  # bad input (ValueError), a file or folder (OSError, or a library's error around one)
        from .core.files import os_error_in

        cause = e if isinstance(e, (ValueError, OSError)) else os_error_in(e)
        if args.debug or cause is None:
            raise
        msg = str(e) if isinstance(cause, ValueError) else \
            f"{getattr(cause, 'filename', '') or ''}: {cause.strerror or cause}".lstrip(": ")
        if cause is not e and str(e):  # a library's error around the OSError: its words too (--debug: the traceback)
            msg += f" ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
        _say_error(args.command, msg)
        return EXIT_ERROR
    except KeyboardInterrupt as e:
        if _main_process():
            print(f"fatstudio {args.command}: interrupted{f' ({e})' if str(e) else ''}; nothing was written.",
                  file=sys.stderr)
        return _interrupted(e)


def _say_error(command: str | None, msg: str) -> None:
    """Print the command's error. Under torchrun every process meets the same error and rank 0 says it: another
    rank first waits (had it ended at once, torchrun could have ended rank 0 before it said anything), and says
    it only when rank 0 has not ended the job meanwhile (an error of its own, which rank 0 would wait on)."""
    if not _main_process():
        try:
            time.sleep(RANK_WAIT_S)
        except KeyboardInterrupt:  # torchrun ended this process: rank 0 has said it
            return
    print(f"fatstudio{f' {command}' if command else ''}: error: {msg}", file=sys.stderr)


def _main_process() -> bool:
    """Whether this process speaks for the command: always, but under torchrun rank 0 alone (every process
    meets the same error; one says it)."""
    if "RANK" not in os.environ:
        return True
    from .core.distributed import World

    try:
        return World.from_env().is_main
    except ValueError:  # RANK that is not a number: not torchrun's
        return True


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
            _interrupt(signum, frame)

    previous: dict[signal.Signals, Any] = {  # the handlers to put back (a callable, SIG_DFL, SIG_IGN or None)
        sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    bar = _ProgressBar(enabled=not args.quiet and world.is_main, processes=world.size)
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
        return _interrupted(e)
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


class _ProgressBar:
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


# ---- generate / attention ---------------------------------------------------------------------------
def cmd_generate(args) -> int:
    from .core.inference import prompting
    from .core.inference.decode_step import compiling_enabled, decode_step_of
    from .core.inference.prompt_events import ClassProbabilities, MaskPredictions, Tokens, prompt_events

    loaded = loaded_model(args.run_dir)
    mode = prompting.prompt_mode(loaded)  # the same decision as the Prompt panel's
    prompt = prompting.encode_prompt(loaded.tokenizer, args.prompt, mode, l_max=loaded.model.config.l_max)
    if args.compile and mode != "generate":
        print(f"fatstudio generate: --compile is for generating text (gpt, gopher); {str(mode).replace('_', '-')} "
              "has no decode step to compile.", file=sys.stderr)
    compiled = mode == "generate" and (_compile_step(loaded) if args.compile else
                                       compiling_enabled() and decode_step_of(loaded).load_cached())
    events = prompt_events(loaded, prompt, tokens=args.tokens, temperature=args.temperature, top_k=args.top_k,
                           top_p=args.top_p, seed=args.seed, alternatives=0, attention=False,
                           compiled=compiled)  # the panel's events
    texts = (c.text for ev in events if isinstance(ev, Tokens) for c in ev.choices)
    if mode == "generate":
        _write_by_line(chain([args.prompt], texts, ["\n"]))
    elif mode == "translate":
        print("".join(texts))
    for ev in events:  # fill_mask, classify
        if isinstance(ev, MaskPredictions):
            for pred in ev.predictions:
                print(f"mask at {pred.position}: " + ", ".join(f"{text!r} {p:.1%}" for text, p in pred.candidates))
        elif isinstance(ev, ClassProbabilities):
            for label, p in ev.probabilities:
                print(f"{label}\t{p:.4f}")
    return 0


def _compile_step(loaded) -> bool:
    """`generate --compile`: the decode step of ``loaded``'s shape, from the cache folder or compiled (in a child
    process, into it), saying on stderr what it did or why generation stays eager. True if it is ready."""
    from .core.inference.decode_export import is_cached
    from .core.inference.decode_step import decode_step_of

    decoder = decode_step_of(loaded)
    kept = is_cached(decoder.model, decoder.lengths)
    if not kept and decoder.problem() is None:  # else nothing compiles: the note says why
        print("fatstudio generate: compiling the decode step, once for this model shape…", file=sys.stderr, flush=True)
    decoder.wait()
    how = "from the cache folder" if kept else f"compiled in {decoder.compile_s or 0:.0f} s, kept in the cache folder"
    print(f"fatstudio generate: {decoder.take_note() or f'the compiled decode step is ready ({how}).'}",
          file=sys.stderr, flush=True)
    return decoder.ready


def _write_by_line(pieces: Iterable[str]) -> None:
    """Write a stream of text pieces to stdout a line at a time: one write and flush per line, not per piece
    (however stdout is buffered); what is pending is written even when the stream is interrupted."""
    pending: list[str] = []
    try:
        for piece in pieces:
            pending.append(piece)
            if "\n" in piece:
                sys.stdout.write("".join(pending))
                sys.stdout.flush()
                pending.clear()
    finally:
        sys.stdout.write("".join(pending))
        sys.stdout.flush()


def _save_maps(maps, out: Path) -> None:
    """Write attention maps to ``out``: a .png as a labelled picture, painted with Qt (the Qt layer's
    `attention_png`: layer and head titles, token axes, a colour bar), anything else by `AttentionMaps.save`."""
    if out.suffix.lower() == ".png":
        from .qt.widgets.attention_png import save_attention_png

        save_attention_png(maps, out)
    else:
        maps.save(out)


def _maps_in_words(maps) -> str:
    """The maps as a person counts them (from 1, the kind in words): "encoder layer 1, decoder layer 1, …"."""
    return ", ".join(name.label for name in maps.maps)


def cmd_attention(args) -> int:
    from .core.inference import generation
    from .core.inference.attention_maps import SAVE_SUFFIXES
    from .core.inspect.probes import MissingProbe, probe_path, probe_scores
    from .core.runs.folder import Run

    out = out_file(args.out, (*SAVE_SUFFIXES, ".png"))
    if args.step is not None:
        if args.prompt is not None or args.source is not None:
            raise ValueError("--step writes the maps saved for the run's probe input; give no --prompt or --source.")
        try:
            maps = Run.open(args.run_dir).load_probe(args.step)
        except MissingProbe as e:
            if args.debug:
                raise
            print(f"fatstudio attention: error: {e}", file=sys.stderr)
            return 1
        _save_maps(maps, out)
        print(f"wrote the probe maps of step {args.step} ({_maps_in_words(maps)}) to {out}")
        scores = probe_scores(probe_path(args.run_dir, args.step))
        if scores.scores:  # the self-attention heads' scores at that step (mean attention weights, 0-1)
            print(f"head scores at step {args.step}:\n{scores.table()}")
        return 0
    if args.prompt is None:
        raise ValueError("give the text with --prompt, or --step N for the probe maps saved at step N.")
    loaded = loaded_model(args.run_dir)
    if loaded.config.model.arch == "edt" and not args.source:
        raise ValueError("this is an encoder-decoder run: give the source text with --source.")
    maps = generation.attention_maps(loaded.model, loaded.tokenizer, args.prompt, source=args.source)
    _save_maps(maps, out)
    print(f"wrote {len(maps.maps)} attention maps ({_maps_in_words(maps)}) to {out}")
    return 0


# ---- cache ------------------------------------------------------------------------------------------------
def cmd_cache(args) -> int:
    from .core.cache import DECODE, TOKENS, cache_cap, entries, prune

    if args.clear:
        removed = prune(cap=0)
        n_tokens, n_steps = (sum(p.parent == kind.root() for p in removed) for kind in (TOKENS, DECODE))
        print(f"removed {n_tokens} token file(s) from {TOKENS.root()} and {n_steps} compiled decode step(s) from "
              f"{DECODE.root()}")
        return 0
    tokens, steps = entries(TOKENS), entries(DECODE)
    print(f"{TOKENS.root()}: {len(tokens)} token file(s), {sum(e.size for e in tokens) / 1e6:,.1f} MB")
    print(f"{DECODE.root()}: {len(steps)} compiled decode step(s) (one per model shape), "
          f"{sum(e.size for e in steps) / 1e6:,.1f} MB")
    print(f"in all {sum(e.size for e in tokens + steps) / 1e6:,.1f} MB of at most {cache_cap() / 1e6:,.0f} MB "
          "(FATSTUDIO_CACHE_MB; the least recently used go first)")
    return 0


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


# ---- export ------------------------------------------------------------------------------------------
def cmd_export(args) -> int:
    from .core.runs.export_hf import export_hf

    print(export_hf(args.run_dir, args.out).summary())
    return 0


def cmd_import(args) -> int:
    from .core.runs.import_hf import import_hf

    done = import_hf(args.source, args.out, args.dtype, progress=lambda fraction, message: print(
        f"{message}…", file=sys.stderr))
    print(done.summary())
    print(f"next: fatstudio generate {shlex.quote(str(done.run_dir))} --prompt TEXT"
          + (" (with [MASK])" if done.model_class == "BertForMaskedLM" else ""))
    return 0
