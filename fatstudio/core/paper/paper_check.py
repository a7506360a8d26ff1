"""Check against the paper: the fast model (`fatstudio.core.model`) against the literal float64 reference of its
algorithm (`fatstudio.core.paper.reference`: Algorithms 1-10 as the paper writes them, loops and columns).

`compare` is the comparison itself, for any batch (padding included): the largest |difference| of the
probabilities P (from the fused path and from the attention-capturing path), of every head's attention weights
softmax(S/√d_attn) and, with a class head, of P(c | x). The reference tests and the app share it.
`check_against_paper` runs it on a float64 copy of any model (fresh or trained, any architecture and
variation) for one short input, which `sample_input` takes from a corpus. The reference loops over positions
and heads in Python, so keep the input short (`CHECK_TOKENS`).
"""
from __future__ import annotations

import copy
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..config import ModelConfig
from ..inference.prompting import Mode, encode_prompt
from ..model import ETransformer, Transformer, build_model
from ..names import MapName
from .pseudocode import ALGORITHMS
from .reference import ReferenceTransformer

if TYPE_CHECKING:
    from ..data.corpora import Corpus
    from ..data.tokenization import TokenizerLike

CHECK_TOKENS = 12  # the input's length (at most): the reference runs its loops in well under a second


@dataclass
class Differences:
    """The largest |fast - reference| of each compared quantity, over every real (unpadded) position."""

    probabilities: float  # P, on the fused and on the attention-capturing path
    attention: dict[MapName, float]  # each attention map's, over all its heads
    classes: float | None = None  # P(c | x) of a class head (None: no class head)

    @property
    def attention_max(self) -> float:
        return max(self.attention.values(), default=0.0)

    @property
    def worst(self) -> float:
        return max(self.probabilities, self.attention_max, self.classes or 0.0)


def compare(model: Transformer, ref: ReferenceTransformer, x: torch.Tensor, z: torch.Tensor | None = None,
            mask: torch.Tensor | None = None, z_mask: torch.Tensor | None = None) -> Differences:
    """Run the batch ``x`` (B, T) (an edt's source ``z`` (B, T_z)) through ``model`` and each real sequence
    through ``ref``; ``mask``/``z_mask`` are padding masks (True at real tokens) of right-padded rows."""
    kw: dict = {} if mask is None else {"mask": mask}
    if z is not None:
        kw.update(context=z, context_mask=z_mask)
    with torch.no_grad():
        plain = model(x, **kw)  # the fused attention kernel
        logits, attn = model(x, return_attention=True, **kw)  # the explicit softmax(S/√d_attn)
        classes = None
        if isinstance(model, ETransformer) and model.class_head is not None:
            classes = model.classify(x, mask=mask)
    assert isinstance(plain, torch.Tensor) and isinstance(classes, (torch.Tensor, type(None)))
    worst_p, worst_c = 0.0, None
    worst_a: dict[MapName, float] = {}
    for b in range(x.shape[0]):
        n = int(mask[b].sum()) if mask is not None else x.shape[1]
        n_z = None if z is None else int(z_mask[b].sum()) if z_mask is not None else z.shape[1]
        P, A = ref.forward(x[b, :n].tolist(), None if z is None else z[b, :n_z].tolist())
        for lg in (plain, logits):
            worst_p = max(worst_p, (lg[b, :n].softmax(-1).T - P).abs().max().item())
        if set(A) != set(attn):
            raise ValueError(f"the fast model's attention maps {sorted(attn)} are not the reference's {sorted(A)}.")
        for key, heads in A.items():
            name = MapName.parse(key)
            n_q = n_z if name.kind == "enc" else n
            n_k = n_z if name.kind in ("enc", "cross") else n
            d = max((attn[key][b, h, :n_q, :n_k] - a).abs().max().item() for h, a in enumerate(heads))
            worst_a[name] = max(worst_a.get(name, 0.0), d)
        if classes is not None:
            d = (classes[b].softmax(-1) - ref.class_probabilities(x[b, :n].tolist())).abs().max().item()
            worst_c = max(worst_c or 0.0, d)
    return Differences(worst_p, worst_a, worst_c)


@dataclass
class PaperCheck:
    """What `check_against_paper` found: the differences, what was compared (``description``), how long it took."""

    differences: Differences
    description: str
    n_tokens: int
    seconds: float


def float64_copy(model: Transformer) -> Transformer:
    """A float64 copy of ``model`` on the CPU in eval mode (copied, not built: no random numbers drawn, so a
    run training in another thread keeps its own)."""
    return copy.deepcopy(model).to("cpu", torch.float64).eval()


def check_against_paper(model: Transformer, x: Sequence[int], z: Sequence[int] | None = None,
                        source: str = "") -> PaperCheck:
    """Compare a float64 copy of ``model`` with the reference on the ids ``x`` (and an edt's source ``z``);
    ``source`` says where the input came from, for the description."""
    t0 = time.perf_counter()
    fast = float64_copy(model)
    cfg = fast.config.resolved()
    ref = ReferenceTransformer(fast.config, fast.state_dict())
    d = compare(fast, ref, torch.tensor([list(x)]), None if z is None else torch.tensor([list(z)]))
    seconds = time.perf_counter() - t0
    layers = cfg.L_enc + 2 * cfg.L_dec if cfg.arch == "edt" else cfg.L
    length = f"{len(x)} target and {len(z)} source tokens" if z is not None else f"{len(x)} tokens"
    description = (
        f"The fast model ({cfg.arch}, its weights copied into float64) against the literal float64 reference of "
        f"Algorithm {ALGORITHMS[cfg.arch]} (fatstudio.core.paper.reference: the paper's pseudocode with its loops and "
        f"columns) on {length}{f' ({source})' if source else ''}. Compared: the probabilities P "
        f"({cfg.vocab_size} × {len(x)}, from the fused attention path and from the path that returns the "
        f"weights), the attention weights softmax(S/√d_attn) of all {cfg.H} heads of each of the {layers} "
        "attention layers" + (", and the class probabilities P(c | x)" if d.classes is not None else "")
        + f"; the largest |difference| of each is shown. Took {seconds:.2f} s.")
    return PaperCheck(d, description, len(x), seconds)


@dataclass
class Sample:
    """A short model input: ``x`` (and an edt's source ``z``), and where it came from, in words."""

    x: list[int]
    z: list[int] | None
    source: str


def sample_input(cfg: ModelConfig, tokenizer: TokenizerLike | None = None, corpus: Corpus | None = None,
                 n: int = CHECK_TOKENS, seed: int = 0) -> Sample:
    """At most ``n`` (and ℓ_max) tokens from the start of ``corpus`` as the model reads them: gpt/gopher the
    tokens, bert [bos] + tokens + [eos], edt a source z = [bos] + tokens + [eos] and x = [bos] + the target's
    tokens (a pair's, or the text's next tokens). Random ids (seeded) when there is no corpus or tokenizer, or
    the tokenizer's ids do not fit the model's N_V."""
    c = cfg.resolved()
    n = max(2, min(n, c.l_max))
    ids: list[int] | None = None
    target: list[int] = []
    if tokenizer is not None and corpus is not None and tokenizer.vocab_size <= c.vocab_size:
        first, second = _texts(corpus)
        try:
            ids, target = tokenizer.encode(first[:40 * n]), tokenizer.encode(second[:40 * n])
        except ValueError:  # symbols this tokenizer does not know
            ids = None
    if tokenizer is None or not ids:
        rng = random.Random(seed)
        draw = [rng.randrange(c.vocab_size) for _ in range(2 * n)]
        return Sample(draw[:n], draw[n:2 * n] if c.arch == "edt" else None, f"{n} random token ids, seed {seed}")
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    name = f"the start of the corpus {getattr(corpus, 'name', '')!r}"
    if c.arch in ("gpt", "gopher"):
        return Sample(ids[:n], None, name)
    if c.arch == "bert":
        return Sample([bos, *ids[:n - 2], eos], None, name)
    if not target:  # a text, not pairs: the next tokens are the target
        ids, target = ids[:n - 2], ids[n - 2:]
    return Sample([bos, *target[:n - 1]], [bos, *ids[:n - 2], eos], name)


def fresh_model(cfg: ModelConfig, seed: int) -> Transformer:
    """A model built from ``cfg`` with its own ``seed`` (eval mode); the process's random generator is put back
    as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model(cfg).eval()


def check_on_corpus(model: Transformer, tokenizer: TokenizerLike | None, corpus: Corpus | None) -> PaperCheck:
    """`check_against_paper` on `sample_input` from the start of ``corpus``."""
    sample = sample_input(model.config, tokenizer, corpus)
    return check_against_paper(model, sample.x, sample.z, sample.source)


def model_input(model: Transformer, tokenizer: TokenizerLike | None, corpus: Corpus | None, text: str,
                mode: Mode | None) -> tuple[list[int], list[int] | None, str]:
    """The ids a forward pass on ``text`` reads (x, an edt's source z, and where they came from in words):
    ``text`` encoded as prompting in ``mode`` encodes it, its last ℓ_max tokens; with no text or no tokenizer,
    `sample_input` from the start of ``corpus`` (or random ids)."""
    cfg = model.config
    if tokenizer is None or not text:
        sample = sample_input(cfg, tokenizer, corpus)
        return sample.x, sample.z, sample.source + ("" if text else " (the Prompt tab's text is empty)")
    prompt = encode_prompt(tokenizer, text, mode, l_max=cfg.l_max)
    z = list(prompt.context_ids) if prompt.context_ids else None
    return list(prompt.ids[-cfg.l_max:]), z, f"the Prompt tab's text {text!r}"


def _texts(corpus: Corpus) -> tuple[str, str]:
    """The first text of a corpus and, for pairs, its target."""
    if corpus.kind == "text":
        return corpus.text or corpus.preview(1 << 16), ""  # a streamed corpus holds only its start
    examples = corpus.examples
    if not examples:
        return "", ""
    a, b = examples[0]
    return a, b if corpus.kind == "pairs" else ""
