"""The command line: ``fatstudio`` (the app), ``train``, ``sweep``, ``generate``, ``attention``, ``export``, ``cache``,
``import``, ``glass-box``, the experiments on a trained run: ``ablate``, ``patch``, ``lens``, ``token-loss``, and ``features`` (a
sparse dictionary trained on a hook point).

Errors print one or two lines and exit non-zero; ``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import gc
import os
import shlex
import signal
import sys
import time
from collections.abc import Iterable
from itertools import chain
from pathlib import Path

from .cli_exercise import cmd_exercise, exercise_parser
from .cli_experiments import cmd_ablate, cmd_lens, cmd_patch, cmd_token_loss, intervention_parsers, loaded_model, out_file
from .cli_features import cmd_features, features_parser
from .cli_interrupt import interrupt, interrupted
from .cli_options import EXIT_ERROR, Parser, number, whole
from .cli_train import cmd_sweep, cmd_train

EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell says of a command whose reader went
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
    features_parser(sub)

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
    gb = sub.add_parser("glass-box", help="build a model whose weights are set by hand, not trained, as a run: "
                        "induction (a previous-token and an induction head) or superposition (an MLP writing known "
                        "sparse features): what the inspection tools should find is known")
    gb.add_argument("kind", choices=["induction", "superposition"])
    gb.add_argument("--out", required=True, metavar="RUN_DIR", help="the run folder to create (new or empty)")
    exercise_parser(sub)
    for name, command in sub.choices.items():
        if name in ("exercise", "glass-box", "cache"):  # they build no model to measure
            continue
        command.add_argument("--force-memory", action="store_true", help="build the model even where its "
                             "estimated memory exceeds what is free (also FATSTUDIO_IGNORE_MEMORY=1)")
    return p


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
    if getattr(args, "force_memory", False):
        from .core.memory import IGNORE_ENV

        os.environ[IGNORE_ENV] = "1"
    if program and args.command not in ("cache", "sweep"):  # the others' work imports torch
        _import_torch()
    previous = signal.signal(signal.SIGTERM, interrupt)
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
        code = {"train": cmd_train, "generate": cmd_generate, "attention": cmd_attention,
                "export": cmd_export, "import": cmd_import, "ablate": cmd_ablate, "patch": cmd_patch, "lens": cmd_lens,
                "token-loss": cmd_token_loss, "features": cmd_features, "glass-box": cmd_glass_box, "sweep": cmd_sweep,
                "cache": cmd_cache, "exercise": cmd_exercise}[args.command](args)
        sys.stdout.flush()  # here, where a reader gone is caught, not at the interpreter's exit
        return code
    except BrokenPipeError:  # the reader went (`| head`): quiet, as a command in a pipeline is
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush too
        return EXIT_PIPE
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
        return interrupted(e)


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


# ---- export ------------------------------------------------------------------------------------------
def cmd_export(args) -> int:
    from .core.runs.export_hf import export_hf

    print(export_hf(args.run_dir, args.out).summary())
    return 0


def cmd_glass_box(args) -> int:
    from .core.runs.glass_box import build_glass_box

    done = build_glass_box(args.kind, args.out)
    print(done.summary())
    print(done.description)
    run = shlex.quote(str(done.run_dir))
    print(f"next: fatstudio features {run} --point mlp/0/out --out DIR" if args.kind == "superposition" else
          f"next: fatstudio ablate {run} --out ablation.csv; fatstudio attention {run} --prompt abcdeabcde --out maps.png")
    return 0


def cmd_import(args) -> int:
    from .core.runs.import_hf import import_hf

    done = import_hf(args.source, args.out, args.dtype, progress=lambda fraction, message: print(
        f"{message}…", file=sys.stderr))
    print(done.summary())
    print(f"next: fatstudio generate {shlex.quote(str(done.run_dir))} --prompt TEXT"
          + (" (with [MASK])" if done.model_class == "BertForMaskedLM" else ""))
    return 0
