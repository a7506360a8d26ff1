"""``fatstudio features``: train a sparse dictionary (an SAE, or an MLP's transcoder) on a hook point of a run and
write it to a folder: fatstudio's (dictionary.safetensors + dictionary.json) or SAELens's (``--format saelens``)."""
from __future__ import annotations

import sys
from pathlib import Path

from .cli_options import number, whole


def features_parser(sub) -> None:
    f = sub.add_parser("features", help="train a sparse autoencoder on a hook point, or a transcoder on an MLP, and "
                       "print its quality (explained variance, CE loss score, L0, dead features)")
    f.add_argument("run_dir")
    f.add_argument("--point", required=True, metavar="NAME", help="a hook point (self/1/resid_post: an SAE) or an "
                   "MLP (mlp/1: a transcoder from mlp/1/in to mlp/1/out)")
    f.add_argument("--step", type=whole(0), metavar="N", help="the weights saved at step N (default: the last "
                   "checkpoint's)")
    f.add_argument("--out", required=True, metavar="DIR", help="the folder to write (made if missing; a run's "
                   "features/ folder is where the app finds it)")
    f.add_argument("--format", default="fatstudio", choices=["fatstudio", "saelens"], help="fatstudio's folder "
                   "(dictionary.safetensors + dictionary.json) or SAELens's (cfg.json + sae_weights.safetensors)")
    f.add_argument("--k", type=whole(1), default=16, help="active features per token (TopK; default 16)")
    f.add_argument("--d-f-mult", type=whole(1, 256), default=8, help="d_f = this × the point's width (default 8)")
    f.add_argument("--tokens", type=whole(1), default=1_000_000, help="training tokens (default 1,000,000)")
    f.add_argument("--lr", type=number(0, 1, lo_open=True), default=None, help="Adam's learning rate (default: "
                   "1e-3 for an SAE, 3e-3 for a transcoder)")
    f.add_argument("--seed", type=whole(0), default=0)
    f.add_argument("--quiet", action="store_true", help="no progress line")


def out_folder(path: str) -> Path:
    """--out DIR, checked before any work: a folder that is empty, holds a dictionary (replaced) or may be made,
    writable; not inside a run folder except under its features/ folder."""
    from .core.files import cannot_make
    from .core.inspect.features.dictionary import FOLDER
    from .core.runs.folder import run_folder_above

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder.")
    run = run_folder_above(out / "x")
    if run is not None and not out.resolve().is_relative_to(run / FOLDER):
        raise ValueError(f"--out {out} is inside the run folder {run}; write it elsewhere, or under {run / FOLDER}.")
    if problem := cannot_make(out):
        raise ValueError(f"--out {out} cannot be written: {problem}.")
    return out


def cmd_features(args) -> int:
    from .cli_experiments import loaded_model
    from .core.inspect.features.dictionary import points_of
    from .core.inspect.features.saelens import export
    from .core.inspect.features.training import train_dictionary

    points_of(args.point)  # a point no dictionary is trained on: refused before any work
    out = out_folder(args.out)
    loaded = loaded_model(args.run_dir, args.step)
    events = train_dictionary(loaded, args.point, d_f_mult=args.d_f_mult, k=args.k, tokens=args.tokens, lr=args.lr,
                              seed=args.seed)
    for e in events:
        if not args.quiet and e.kind == "progress":
            print(f"\r{e.fraction:4.0%} · {e.tokens:,} tokens · loss {e.loss:.4f} · L0 {e.l0:.1f} · dead "
                  f"lately {e.dead_fraction:.1%}", end="", file=sys.stderr, flush=True)
    if not args.quiet:
        print(file=sys.stderr)
    d = e.dictionary
    assert d is not None and e.quality is not None
    if args.format == "saelens":
        export(d, out)
    else:
        d.save(out)
    print(f"{d.describe()} at step {loaded.step}, {e.tokens:,} tokens: {e.quality.line()}")
    print(f"wrote it to {out}{' (SAELens format)' if args.format == 'saelens' else ''}")
    return 0
