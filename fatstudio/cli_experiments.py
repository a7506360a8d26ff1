"""The experiments on a trained run, for the command line (`cli`): ``ablate``, ``patch``, ``lens``,
``token-loss``, their parsers and their output files (layers and heads 0-based in the files)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .cli_options import INT64_MAX, whole


def intervention_parsers(sub) -> None:
    """ablate, patch, lens, token-loss: experiments on a trained run (layers and heads 0-based in the files)."""
    step = ("the weights saved at step N: an evaluation's (train.keep_weights) or the last checkpoint's; default: "
            "the last checkpoint's")
    ab = sub.add_parser("ablate", help="knock out each head and MLP in turn and write the change in validation loss")
    ab.add_argument("run_dir")
    ab.add_argument("--kind", default="zero", choices=["zero", "mean", "resample"], help="replace the component's "
                    "output by zeros, its mean over the validation batch, or its output on another row (default zero)")
    ab.add_argument("--step", type=whole(0), metavar="N", help=step)
    ab.add_argument("--out", required=True, help="FILE.json or FILE.csv")

    pa = sub.add_parser("patch", help="patch a clean prompt's activations into a corrupted one")
    pa.add_argument("run_dir")
    pa.add_argument("--clean", required=True, metavar="TEXT", help="the text (BERT: with [MASK]; an "
                    "encoder-decoder: the source, its decoder reading --prefix)")
    pa.add_argument("--corrupt", required=True, metavar="TEXT", help="as many tokens as --clean")
    pa.add_argument("--target", metavar="TOKEN", help="the token whose logit difference is restored (default: the "
                    "clean prompt's most likely token at --position)")
    pa.add_argument("--position", type=whole(-INT64_MAX), metavar="T", help="where the prediction is read, 0-based (BERT: of "
                    "[bos] + text + [eos]; an encoder-decoder: of [bos] + prefix), -1 the last; default: the last "
                    "(BERT: the first [MASK], else the last text token)")
    pa.add_argument("--prefix", metavar="TEXT", help="an encoder-decoder's target prefix, the same in both runs "
                    "(default: none, the decoder reads [bos])")
    pa.add_argument("--step", type=whole(0), metavar="N", help=step)
    pa.add_argument("--out", required=True, help="FILE.json")

    le = sub.add_parser("lens", help="the logit lens: the top token after every layer at every position")
    le.add_argument("run_dir")
    le.add_argument("--prompt", required=True, metavar="TEXT", help="the text (BERT: with [MASK], row ℓ at position "
                    "t predicting the token at t; an encoder-decoder: the decoder's text, read given --source)")
    le.add_argument("--source", metavar="TEXT", help="the source text (encoder-decoder runs)")
    le.add_argument("--step", type=whole(0), metavar="N", help=step)
    le.add_argument("--out", required=True, help="FILE.json")

    tl = sub.add_parser("token-loss", help="the loss of every validation token (gpt, gopher, bert, edt), or its change "
                        "against another run")
    tl.add_argument("run_dir")
    tl.add_argument("--step", type=whole(0), metavar="N", help=step)
    against = tl.add_mutually_exclusive_group()
    against.add_argument("--against", metavar="RUN_DIR2", help="a run on the same corpus to compare with")
    against.add_argument("--against-step", type=whole(0), metavar="M", help="this run's weights of step M to compare with")
    tl.add_argument("--out", required=True, help="FILE.json or FILE.csv")


# ---- ablate / patch / lens / token-loss ------------------------------------------------------------------
def out_file(path: str, suffixes: tuple[str, ...]) -> Path:
    """--out, if it ends in one of ``suffixes`` and may be written (`targets.check_output`: never into a run)."""
    from .core.runs.targets import check_output

    out = Path(path)
    if out.suffix.lower() not in suffixes:
        raise ValueError(f"--out {out}: the file must end in {' or '.join(suffixes)}.")
    return check_output(out)


def write(out: Path, data: dict, csv: Callable[[], str] | None = None) -> None:
    import json

    from .core.files import atomic_write

    atomic_write(out, csv() if out.suffix.lower() == ".csv" and csv else json.dumps(data, ensure_ascii=False))


def loaded_model(run_dir: str, step: int | None = None):
    """The model of ``run_dir`` at ``step`` (None: the last checkpoint's); for a run whose weights carry no
    checksum (an older fatstudio's), a note on stderr says that damage to them cannot be detected."""
    import sys

    from .core.runs.folder import Run, load_at_step

    run = Run.open(run_dir)
    loaded = load_at_step(run, step)
    if note := run.unverified():  # once it loads (a refusal stays one line)
        print(f"note: {note}", file=sys.stderr)
    return loaded


def cmd_ablate(args) -> int:
    from .core.inspect.ablation import knockout_table

    out = out_file(args.out, (".json", ".csv"))
    loaded = loaded_model(args.run_dir, args.step)
    table = knockout_table(loaded, args.kind)
    write(out, table.to_dict(), table.csv)
    worst = max(table.rows, key=lambda r: r.delta_loss)
    print(f"wrote the {args.kind} ablation of {len(table.rows)} heads and MLPs at step {loaded.step} to {out}: "
          f"validation loss {table.baseline_loss:.4f}; knocking out {worst.component.label} changes it "
          f"most ({worst.delta_loss:+.4f})")
    return 0


def cmd_patch(args) -> int:
    from .core.inspect.patching import patch

    out = out_file(args.out, (".json",))
    loaded = loaded_model(args.run_dir, args.step)
    result = patch(loaded.model, loaded.tokenizer, args.clean, args.corrupt, args.target, position=args.position,
                   prefix=args.prefix)
    write(out, result.to_dict())
    name, h = max(((n, h) for n, row in result.heads.items() for h in range(len(row))),
                  key=lambda nh: result.heads[nh[0]][nh[1]])
    print(f"wrote the patching of {len(result.clean_tokens)} positions to {out}: logit difference of {result.target!r} "
          f"over {result.foil!r} at position {result.position} is {result.clean_logit_diff:.3f} clean, "
          f"{result.corrupted_logit_diff:.3f} corrupted; "
          f"{name.head_label(h)} restores the most ({result.heads[name][h]:.0%})")
    return 0


def cmd_lens(args) -> int:
    from .core.inspect.lens import lens

    out = out_file(args.out, (".json",))
    loaded = loaded_model(args.run_dir, args.step)
    result = lens(loaded.model, loaded.tokenizer, args.prompt, args.source)
    write(out, result.to_dict())
    print(f"wrote the logit lens of {len(result.tokens)} tokens after each of {len(result.top_tokens) - 1} layers "
          f"(and the embedding) at step {loaded.step} to {out}")
    return 0


def cmd_token_loss(args) -> int:
    from .core.inspect.token_classes import report
    from .core.inspect.token_loss import diff, token_losses, validation_split

    out = out_file(args.out, (".json", ".csv"))
    loaded = loaded_model(args.run_dir, args.step)
    split = validation_split(loaded)
    result = token_losses(loaded, split)
    print(f"{result.n_tokens} validation tokens at step {loaded.step}: mean loss {result.mean:.4f}")
    if args.against is None and args.against_step is None:
        write(out, report(result), result.csv)
        print(f"wrote them to {out}")
        return 0
    other = loaded_model(args.against) if args.against else loaded_model(args.run_dir, args.against_step)
    if args.against:
        split = validation_split(other)
    compared = diff(result, token_losses(other, split))
    write(out, report(compared), compared.csv)
    print(f"against {other.label}: mean loss {compared.against.mean:.4f}, difference "
          f"{compared.this.mean - compared.against.mean:+.4f}; wrote both and the change per token to {out}")
    return 0


