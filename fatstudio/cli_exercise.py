"""``fatstudio exercise list | show NAME | check NAME FILE.py``: the exercises (`core.paper.exercises`) on the
command line. ``check`` exits 0 only when the exercise passes (1 when it does not, 2 on bad input), so a teacher can
grade a folder of submissions: ``for f in subs/*.py; do fatstudio exercise check attention "$f"; done``."""
from __future__ import annotations

import difflib
import sys

from .cli_options import number

EXIT_FAILED = 1
SOURCE_LIMIT = 1 << 20  # bytes: a learner's file larger than this is refused


def exercise_parser(sub) -> None:
    ex = sub.add_parser("exercise", help="write the paper's algorithms yourself: list the exercises, show one, "
                        "check a solution file against the float64 reference (exit 0 only when it passes)")
    what = ex.add_subparsers(dest="action", required=True)
    what.add_parser("list", help="the exercises, with the algorithm each is")
    show = what.add_parser("show", help="the stub to fill in (save it as NAME.py), its hints or its solution")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--hints", action="store_true", help="also print the hints")
    show.add_argument("--solution", action="store_true", help="print the solution instead of the stub")
    check = what.add_parser("check", help="run FILE.py's function against the reference (in a child process with "
                            "a time limit); exit 0 when it passes, 1 when not")
    check.add_argument("name", metavar="NAME")
    check.add_argument("file", metavar="FILE.py")
    check.add_argument("--run", metavar="RUN_DIR", help="also check on this run's weights (the model in focus)")
    check.add_argument("--timeout", type=number(0.1, 3600), default=None, metavar="S",
                       help="seconds the code may run (default 10; 120 with --train)")
    check.add_argument("--train", action="store_true", help="also Train with my code: a short run with your "
                       "function in a small GPT beside the same run with the model's own")


def _exercise(name: str):
    from .core.paper.exercises.catalog import BY_NAME

    if name not in BY_NAME:
        close = difflib.get_close_matches(name, BY_NAME, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"no exercise {name!r}; {hint}`fatstudio exercise list` lists them.")
    return BY_NAME[name]


def cmd_exercise(args) -> int:
    from .core.paper.exercises.catalog import EXERCISES

    if args.action == "list":
        for e in EXERCISES:
            train = "  (Train with my code)" if e.trains else ""
            print(f"{e.name:<22} {e.algorithm:<34} {e.title}{train}")
        return 0
    e = _exercise(args.name)
    if args.action == "show":
        print(e.solution if args.solution else e.stub, end="")
        if args.hints:
            print("\n" + "\n".join(f"# hint {i}: {h}" for i, h in enumerate(e.hints, 1)))
        return 0
    return _check(e, args)


def _check(e, args) -> int:
    from .cli_experiments import loaded_model
    from .core.files import read_text
    from .core.paper.exercises import sandbox
    from .core.paper.exercises.catalog import EXERCISES

    if args.train and not e.trains:
        raise ValueError(f"{e.name} cannot be trained with; --train is for "
                         f"{', '.join(x.name for x in EXERCISES if x.trains)}.")
    source = read_text(args.file, limit=SOURCE_LIMIT)
    if args.run:
        loaded = loaded_model(args.run)
        said = sandbox.check(e.name, source, loaded.config.model, loaded.model.state_dict(),
                             limit_s=args.timeout or sandbox.CHECK_LIMIT_S)
    else:
        said = sandbox.check(e.name, source, limit_s=args.timeout or sandbox.CHECK_LIMIT_S)
    print(f"{args.file}: {said['message']}")
    if said["passed"] and args.train:
        said = sandbox.train(e.name, source, limit_s=args.timeout or sandbox.TRAIN_LIMIT_S)
        print(f"{args.file}: Train with my code: {said['message']}")
    sys.stdout.flush()
    return 0 if said["passed"] else EXIT_FAILED
