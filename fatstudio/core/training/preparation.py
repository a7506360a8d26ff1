"""The data a run trains on: corpus, tokenizer and dataset, prepared as training (and the estimate) need them."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Collection, Generator

from ..config import DataConfig, ModelConfig, RunConfig
from ..data import corpora, tokenization
from ..data.chars import chars_per_token
from ..data.corpora import Dataset, Prepared  # corpora.load_corpus etc. looked up per call (tests substitute them)
from ..data.tokenization import Tokenizer
from ..distributed import World
from ..runs.folder import Run
from ..threads import spawn
from .events import Prepare


def prepare(config: RunConfig, run: Run | None = None, prepared: Prepared | None = None, world: World | None = None
            ) -> Generator[Prepare, None, tuple[Tokenizer, Dataset, RunConfig, dict[str, float] | None]]:
    """Corpus, tokenizer (the run's own when resuming) and dataset, as Prepare events while they load;
    returns them with the config whose N_V (model.vocab_size) and n_classes come from them, and the
    corpus's characters per token (`chars_per_token`). Under torchrun (``world``) rank 0 makes the
    tokenizer and the other processes take a copy of it. Drive it with ``result = yield from prepare(...)``."""

    t, d = config.train, config.data
    vocab_cap = d.vocab_size  # data.vocab_size: the most tokens the tokenizer may have (word, bpe)
    if prepared is not None and not prepared.serves(d.corpus, d.task, d.tokenizer, vocab_cap, t.seed, d.modadd_p):
        prepared = None
    if prepared:
        corpus = prepared.corpus
        yield Prepare(f"using corpus {d.corpus} as loaded", 0.2)
    else:
        yield Prepare(f"loading corpus {d.corpus}", 0.0)
        corpus = yield from _with_progress(lambda progress: corpora.load_corpus(d.corpus, d.task, progress, t.seed,
                                                                                       d.modadd_p), 0.0, 0.2)
        for note in corpus.notes:
            yield Prepare(note, 0.2)
    world = world or World()
    tokenizer: Tokenizer | None = None
    if run:
        tokenizer = run.load_tokenizer()
    elif prepared:
        tokenizer = prepared.tokenizer
    elif world.is_main:
        yield Prepare(f"training the {d.tokenizer} tokenizer", 0.2)
        tokenizer = yield from _with_progress(
            lambda progress: tokenization.train_tokenizer(d.tokenizer, corpus.texts(), vocab_cap, progress), 0.2, 0.4)
    if world.distributed:
        tokenizer = Tokenizer.from_json(world.share(tokenizer.to_json() if tokenizer else None))
    assert tokenizer is not None
    yield Prepare("tokenizing the corpus", 0.4)
    dataset = yield from _with_progress(lambda progress: corpora.build_dataset(
        corpus, tokenizer, d.task, config.model.l_max, d.val_fraction, d.p_mask, t.seed, progress), 0.4, 0.9)
    mcfg = config.model.replace(vocab_size=tokenizer.vocab_size,  # N_V: the tokenizer's actual size
                                n_classes=dataset.n_classes if d.task == "classification" else 0)
    return tokenizer, dataset, RunConfig(mcfg, d, t).validate(), chars_per_token(corpus, tokenizer, dataset)


# what a fine-tuning run takes from its config rather than from the run it starts from: dropout is a training choice
# that changes no weight (N_V and the class head come from the source's tokenizer and the dataset, checked as they do)
_NOT_FROM_SOURCE = ("dropout",)


def init_config(config: RunConfig, source: Run, given: Collection[str] | None = None) -> tuple[RunConfig, str]:
    """``config`` for a new run that starts from ``source``'s weights (``--init-from``), and the sentence that says
    what comes from ``source``. The model settings (all but ``model.dropout``), the tokenizer (``data.tokenizer``,
    ``data.vocab_size``) and the task are the source's: a key of them that ``config`` sets to another value is a
    ValueError naming each. ``given``: the ``table.key`` names the config sets (a config file's and ``--set``'s);
    None: those whose value is not the default; () (the app's Fine-tune…, whose settings are not for the model it
    starts from): none, so that all of them come from the source and the sentence says which."""
    model, data, theirs = config.model, config.data, source.config
    defaults = {"model": ModelConfig(), "data": DataConfig()}

    def set_to(table: str, name: str, value: object) -> bool:
        if given is None:
            return value != getattr(defaults[table], name)
        return f"{table}.{name}" in given

    n_v = theirs.model.vocab_size  # the source's tokenizer's N_V (its weights' too)
    resolved = theirs.model.resolved()  # a setting the source left to its default (None) is the value it resolved to
    clashes = [f"model.{f.name} = {getattr(model, f.name)!r} ({source.name} has {getattr(resolved, f.name)!r})"
               for f in dataclasses.fields(ModelConfig) if f.name not in _NOT_FROM_SOURCE
               and getattr(model, f.name) not in (getattr(theirs.model, f.name), getattr(resolved, f.name))
               and set_to("model", f.name, getattr(model, f.name))]
    if data.tokenizer != theirs.data.tokenizer and set_to("data", "tokenizer", data.tokenizer):
        clashes.append(f"data.tokenizer = {data.tokenizer!r} ({source.name}'s tokenizer is {theirs.data.tokenizer!r})")
    if data.vocab_size not in (n_v, theirs.data.vocab_size) and set_to("data", "vocab_size", data.vocab_size):
        clashes.append(f"data.vocab_size = {data.vocab_size!r} (no tokenizer is trained: {source.name}'s has N_V = {n_v})")
    if data.task != theirs.data.task and set_to("data", "task", data.task):
        clashes.append(f"data.task = {data.task!r} ({source.name}'s weights are trained for {theirs.data.task!r})")
    if clashes:
        raise ValueError(f"--init-from {source.path} starts from that run's model, tokenizer and task, which the config "
                         f"sets otherwise: {'; '.join(clashes)}; remove {'it' if len(clashes) == 1 else 'them'} "
                         "from the config.")
    r = theirs.model
    said = (f"starting from the weights of {source.name} (step {source.info.checkpoint_step}): its model ({r.arch}, "
            f"L = {r.L if r.arch != 'edt' else f'{r.L_enc}+{r.L_dec}'}, H = {r.H}, d_e = {r.d_e}, l_max = {r.l_max}), "
            f"its tokenizer ({'imported' if source.meta.get('hf_class') else theirs.data.tokenizer}, N_V = {n_v}) "
            f"and its task ({theirs.data.task}); the corpus and the training settings are the config's.")
    return RunConfig(theirs.model.replace(dropout=model.dropout),
                     data.replace(tokenizer=theirs.data.tokenizer, vocab_size=theirs.data.vocab_size, task=theirs.data.task),
                     config.train), said


def _with_progress(fn, lo: float, hi: float):
    """Run ``fn(progress)`` in a helper thread, yielding its (fraction, message) reports as Prepare events
    while it works; return its result (``result = yield from _with_progress(...)``), re-raising its error.
    Left early (Ctrl-C, SIGTERM, the generator closed), the helper stops at its next report (about a megabyte
    of text later)."""
    reports: list[tuple[float, str]] = []
    result: dict = {}
    left = threading.Event()

    def report(fraction: float, message: str) -> None:
        if left.is_set():
            raise _Left
        reports.append((fraction, message))

    def target():
        try:
            result["value"] = fn(report)
        except BaseException as e:  # re-raised in the generator's thread below
            result["error"] = e

    worker = spawn(target, "prepare")
    try:
        while worker.is_alive():
            worker.join(0.1)
            if reports:
                fraction, message = reports[-1]
                reports.clear()
                yield Prepare(message, lo + (hi - lo) * min(max(fraction, 0.0), 1.0))
    finally:
        left.set()
    if "error" in result:
        raise result["error"]
    return result["value"]


class _Left(Exception):
    """Raised in the helper thread of a preparation its caller left (`_with_progress`)."""
