"""The data a run trains on: corpus, tokenizer and dataset, prepared as training (and the estimate) need them."""
from __future__ import annotations

import threading
from collections.abc import Generator

from ..config import RunConfig
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
        corpus, tokenizer, d.task, config.model.l_max, d.val_fraction, d.p_mask, t.seed, progress, d.split), 0.4, 0.9)
    mcfg = config.model.replace(vocab_size=tokenizer.vocab_size,  # N_V: the tokenizer's actual size
                                n_classes=dataset.n_classes if d.task == "classification" else 0)
    return tokenizer, dataset, RunConfig(mcfg, d, t).validate(), chars_per_token(corpus, tokenizer, dataset)


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
