"""A walk through one forward pass, line by line of the pseudocode (`pseudocode`), and back through the backward
pass, with the model's own tensors.

`walk` runs the model once on the ids ``x`` (an edt's source ``z``) reading every hook point (`core.model.hooks`),
and gives one `Step` per line of Algorithms 8/9/10 as `Pseudocode.lines` lists them (the lines inside ``for l``
once per layer), each attention line followed by the lines of MHAttention (Algorithms 4 and 5: Q, K, V; the
scores S; the Mask; the softmax; Y^h; W_o Y) for one head. Each step's `Shown` tensors are the ones the forward
pass computed, laid out as the paper writes them (vectors as columns: X ∈ ℝ^(d_e×ℓ)), the chosen query token's
column marked.

The backward pass runs on a float64 copy: the loss of Algorithm 11, 12 or 13, then the steps in reverse, each
showing ∂loss/∂(its tensors) with a `GradCheck`: the analytic gradient against a central finite difference on
its largest entries (the tensor is changed at its hook point by ±h and the loss recomputed). The first backward
step is the loss itself, with the loss ≈ ln N_V that a model at step 0 has.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..model import EDTransformer, ETransformer, Transformer, hooks
from ..names import AttentionKind, MapName, of_stack
from .pseudocode import OUTPUTS, Line, Pseudocode, pseudocode

H_STEP = 1e-4  # the finite difference's step in float64: rounding error ~ ε·|loss|/h, truncation ~ h²
CHECKED = 3  # entries checked per step: its gradient's largest
MHA_PARTS = ("qkv", "scores", "mask", "softmax", "weighted", "out")


@dataclass(frozen=True)
class Source:
    """Where a shown tensor comes from: a hook point (``"point"``), a parameter (``"param"``, a state-dict name),
    the logits (``"logits"``) or the input ids (``"ids"``); ``key`` indexes its batch row 0 (a head, a column)."""

    kind: str
    name: str = ""
    key: tuple = ()
    view: Callable[[torch.Tensor], torch.Tensor] | None = None  # applied after ``key`` (a reshape, a softmax)

    def layout(self, t: torch.Tensor) -> np.ndarray:
        """Batch row ``t``'s part as the paper lays it out: 2-D, positions as columns, a vector as one column."""
        t = t[self.key] if self.key else t
        a = (self.view(t) if self.view is not None else t).detach().cpu().numpy()
        return a.T if a.ndim == 2 else a.reshape(-1, 1)


@dataclass
class Shown:
    """One tensor of a step: its name (paper notation), shape in the paper's symbols and in numbers, values as the
    paper lays them out (2-D; vectors as one column), the query's column (None: not a per-position tensor)."""

    name: str
    symbols: str  # "d_e×ℓ", or "d_e" for a vector
    values: np.ndarray
    query: int | None
    source: Source
    note: str = ""

    @property
    def shape(self) -> str:
        """The shape in the paper's symbols and in numbers: "ℝ^(d_e×ℓ) = ℝ^(12×7)"."""
        r, c = self.values.shape
        return f"ℝ^({self.symbols}) = ℝ^({r}×{c})" if "×" in self.symbols else f"ℝ^{self.symbols} = ℝ^{r}"


@dataclass
class GradCheck:
    """The analytic gradient against a central finite difference, (index in `Shown.values`, analytic, numeric,
    relative error) per entry checked. The relative error is |a - n| / max(|a|, |n|, δ), δ the difference's own
    rounding error (16 ε |loss| / h): a gradient that is 0 up to rounding is not a relative error of 1."""

    tensor: str
    entries: list[tuple[tuple[int, ...], float, float, float]]
    floor: float  # δ
    step: float = H_STEP  # the difference's h

    @property
    def resolution(self) -> float:
        """The smallest |gradient| the difference checks to 1e-6; below it a larger error is the difference's."""
        return 1e6 * self.floor

    @property
    def worst(self) -> float:
        return max((e[3] for e in self.entries), default=0.0)


@dataclass
class Step:
    """One line of the walk: ``line`` indexes `Pseudocode.lines` (the line to highlight), ``layer`` the layer (0-based)
    of a line inside ``for l``, ``part`` the MHAttention line's part ("" elsewhere)."""

    line: int
    layer: int | None
    part: str
    title: str
    text: str
    words: str
    shown: list[Shown] = field(default_factory=list)
    check: GradCheck | None = None


@dataclass
class Walk:
    """The walk of one input: the forward steps, the backward steps (the loss first), what was read."""

    code: Pseudocode
    x: list[int]
    z: list[int] | None
    query: int
    head: int
    forward: list[Step]
    backward: list[Step]
    loss: float
    initial_loss: float | None
    predicted: int  # how many tokens the loss predicts (its terms)

    def loss_text(self) -> str:
        """The loss per token, as everywhere else in the app, with the sum it is (Algorithms 11-13)."""
        n = self.predicted
        return f"{self.loss / n:.4f} nats/token (sum {self.loss:.4f} over {n} position{'s' * (n != 1)})"


# ------------------------------------------------------------------------------------------------- the plan
def _mha_lines(code: Pseudocode) -> tuple[int, dict[str, int]]:
    """Where the notes on MHAttention start (after the algorithm), and the note line each of its parts
    highlights."""
    start = next(i for i, ln in enumerate(code.lines) if ln.text.startswith("MHAttention("))
    found = {}
    for i in range(start + 1, len(code.lines)):
        text = code.lines[i].text
        for part, prefix in (("qkv", "  for h"), ("scores", "    S ←"), ("softmax", "    Y^h ←"), ("out", "  Y ← [")):
            if text.startswith(prefix):
                found[part] = i
    found["mask"], found["weighted"] = found["scores"], found["softmax"]
    return start, found


Place = tuple[int, "int | None", str, "AttentionKind | None"]  # line index, layer, MHAttention part, its kind


def plan(code: Pseudocode) -> list[Place]:
    """(line index, layer, MHAttention part, the attention kind of the part) of each forward step, in the order
    the forward pass runs: every line with a paper line number or a tensor, those inside ``for l`` once per
    layer, each attention line preceded by its MHAttention parts."""
    lines, (end, mha) = code.lines, _mha_lines(code)
    out: list[Place] = []
    i = 0
    while i < end:
        line = lines[i]
        if line.number is None and line.tap is None:
            i += 1
            continue
        out.append((i, None, "", None))
        if line.text.startswith("for l"):
            body = []
            i += 1
            while lines[i].text != "end":
                body.append(i)
                i += 1
            stack = lines[body[0]].stack
            for l in range(code.layers[stack] if stack else 1):
                for b in body:
                    if lines[b].attention is not None:  # MHAttention runs, then its output is added
                        out += [(mha[p], l, p, lines[b].attention) for p in MHA_PARTS]
                    out.append((b, l, "", None))
            continue
        i += 1
    return out


# ---------------------------------------------------------------------------------------------- the reading
class _Reader:
    """Builds each step's `Shown` tensors from one forward pass's tensors (batch row 0 of each)."""

    def __init__(self, model: Transformer, code: Pseudocode, seen: dict[str, list[torch.Tensor]], logits: torch.Tensor,
                 x: list[int], z: list[int] | None, query: int, head: int, classes: torch.Tensor | None = None) -> None:
        self.model, self.code, self.c = model, code, code.config
        self.seen, self.logits, self.x, self.z, self.query, self.head = seen, logits, x, z, query, head
        self.classes = classes  # a bert's class head's logits (B, n_classes), or None
        self.framing = True  # whether the step's columns are the positions of x (the query's sequence)
        self.params: dict[str, torch.Tensor] = dict(model.named_parameters()) | dict(model.named_buffers())

    def tensor(self, s: Source) -> torch.Tensor:
        """The whole of ``s``'s tensor (batch row 0)."""
        if s.kind == "point":
            return self.seen[s.name][0][0]
        if s.kind == "param":
            return self.params[s.name]
        if s.kind == "logits":
            return self.logits[0]
        if s.kind == "class-logits" and self.classes is not None:
            return self.classes[0]
        return torch.tensor(self.z if s.name == "z" else self.x, dtype=torch.float64)[None, :]

    def show(self, name: str, symbols: str, s: Source, query: bool = True, note: str = "") -> Shown:
        a = s.layout(self.tensor(s).double())
        framed = query and self.framing and a.shape[1] > 1 and self.query < a.shape[1]
        return Shown(name, symbols, a, self.query if framed else None, s, note)

    # -- the lines ---------------------------------------------------------------------------------------------
    def step(self, index: int, layer: int | None, part: str, kind: AttentionKind | None) -> Step:
        line = self.code.lines[index]
        where = line.where() or "Algorithms 4 and 5 (MHAttention)"
        if layer is not None:
            where += f" · layer l = {layer + 1}"
        if part:
            where += f" · head h = {self.head + 1}"
        self.framing = kind != "enc" and (kind is not None or self._seq(line)[0] == "x")  # an edt's z: no query
        words, shown = self.attention(kind, layer or 0, part) if kind else self.read(line, layer)
        return Step(index, layer, part, where, line.text.strip(), words, shown)

    def _seq(self, line: Line) -> tuple[str, str]:
        """The line's sequence symbol and its length's: ("x", "ℓ"), an edt's ("z", "ℓ_z") or ("x", "ℓ_x")."""
        if self.c.arch != "edt":
            return "x", "ℓ"
        encoder = line.stack == "encoder" or "ℓ_z" in line.text or line.text.startswith("Z")
        return ("z", "ℓ_z") if encoder else ("x", "ℓ_x")

    def read(self, line: Line, l: int | None) -> tuple[str, list[Shown]]:
        c = self.c
        seq, n = self._seq(line)
        tap = line.tap_at(l or 0)
        point = tap.point if tap is not None else ""
        big = "Z" if seq == "z" else "X"
        if "length(" in line.text:
            ids = self.z if seq == "z" else self.x
            return (f"{n} = {len(ids or [])}: the number of token ids the model reads.",
                    [self.show(seq, f"1×{n}", Source("ids", seq, view=lambda t: t.T))])
        if line.text.startswith("for l"):
            return (f"The body runs once per layer, {line.shape}; each layer has its own parameters 𝒲_l.", [])
        if line.text == "end":
            return ("The layers are done: the stream now holds every position's representation.", [])
        if line.text.startswith("for t"):
            ids = self.z if seq == "z" and self.z is not None else self.x
            t = min(self.query, len(ids) - 1)
            v = ids[t]
            shown = [self.show(f"W_e[:, {seq}[{t + 1}]]", "d_e", Source("param", "embed.W_e.weight", (v,)))]
            words = f"Token {v} at position t = {t + 1} is looked up as column {v} of W_e (Algorithm 1)"
            if c.positions == "learned":
                shown.append(self.show(f"W_p[:, {t + 1}]", "d_e", Source("param", "embed.W_p.weight", (t,))))
            elif c.positions == "sinusoidal":
                shown.append(self.show(f"W_p[:, {t + 1}]", "d_e", Source("param", "embed.W_p_table", (t,))))
            if c.positions in ("learned", "sinusoidal"):
                words += ", and its position's column of W_p is added (Algorithm 2)"
            shown.append(self.show(f"e_{t + 1}", "d_e", Source("point", point, (t,))))
            return words + ".", shown
        if point in OUTPUTS:
            return self.output(point)
        if point.endswith("embed"):
            return (f"The embeddings side by side, one column per position: {big} ∈ ℝ^(d_e×{n}).",
                    [self.show(big, f"d_e×{n}", Source("point", point))])
        stats = self._stats_point(point, line)
        if stats is not None:  # a norm's line
            return self.norm(point, stats, big, n)
        sub = point.rsplit("/", 1)[0] if point.endswith("/sum") else self._sublayer(point)
        call = ("MLP" if "mlp" in sub else "MHAttention") + (f"({big}̃)" if self.c.norm_position == "pre" else f"({big})")
        d = "d_f" if point == "proj" else "d_e"
        out = [self.show(call, f"{d}×{n}", Source("point", f"{sub}/out"))] if sub else []
        words = (f"The residual connection adds the sublayer's output {call} to the stream {big}." if sub else
                 "The final projection of BERT's head: GELU(W_f X + b_f 1ᵀ).")
        return words, [*out, self.show(big, f"{d}×{n}", Source("point", point))]

    def _sublayer(self, point: str) -> str:
        """The sublayer whose output a stream point follows ("self/0/resid_mid" → "self/0")."""
        if point.count("/") != 2:
            return ""
        kind, l, what = point.split("/")
        if what == "resid_mid":
            return f"{kind}/{l}"
        if what == "resid_mid_cross":
            return f"cross/{l}"
        if what == "resid_post":
            return f"{of_stack(kind, 'mlp')}/{l}"  # type: ignore[arg-type]
        return ""

    def _stats_point(self, point: str, line: Line) -> str | None:
        """The hook point of the statistics of the norm a line applies (None: not a norm's line)."""
        if "_norm(" not in line.text:
            return None
        if point.endswith("/in"):
            return point.replace("/in", "/norm-stats")
        if point.endswith("resid_pre"):
            return of_stack(point.split("/")[0], "embed-norm-stats")  # type: ignore[arg-type]
        if point.endswith("final"):
            return point.replace("final", "final-norm-stats")
        if point == "proj-norm":
            return "proj-norm-stats"
        sub = self._sublayer(point)
        return f"{sub}/norm-stats" if sub else None

    def norm(self, point: str, stats: str, big: str, n: str) -> tuple[str, list[Shown]]:
        rms = self.c.norm == "rms"
        d = "d_f" if point == "proj-norm" else "d_e"
        words = ("RMSnorm (Algorithm 6 without the mean): each column is divided by √(mean(e²) + ε) and scaled by γ."
                 if rms else "layer_norm (Algorithm 6): each column e has its mean m taken away, is divided by "
                 "√(v + ε), v its variance, then scaled by γ and shifted by β.")
        shown = []
        if not rms:
            shown.append(self.show("m", f"1×{n}", Source("point", stats, (..., 0), _row), note="the mean of each column"))
        shown.append(self.show("√(v + ε)", f"1×{n}", Source("point", stats, (..., 1), _row),
                               note="v = mean(e²) (RMSnorm)" if rms else "v = mean((e - m)²)"))
        name = f"{big}̃" if point.endswith("/in") else big
        return words, [*shown, self.show(name, f"{d}×{n}", Source("point", point))]

    def output(self, point: str) -> tuple[str, list[Shown]]:
        c = self.c
        if point == "class-logits":
            return ("The class head (§3) reads the first position's final vector: P(c | x) = softmax(W_c X[:, 1] "
                    "+ b_c) over the classes.",
                    [self.show("W_c X[:, 1] + b_c", "n_classes", Source("class-logits")),
                     self.show("P(c | x)", "n_classes", Source("class-logits", view=lambda t: t.softmax(-1)))])
        n = "ℓ_x" if c.arch == "edt" else "ℓ"
        words = (f"The unembedding W_u turns each column into {c.vocab_size} scores (logits); their softmax is "
                 f"P, column t the distribution of the token " + ("at t (Algorithm 9)." if c.arch == "bert"
                                                                   else "after t."))
        return words, [self.show("W_u X", f"N_V×{n}", Source("logits")),
                       self.show("P", f"N_V×{n}", Source("logits", view=lambda t: t.softmax(-1)))]

    def attention(self, kind: AttentionKind, l: int, part: str) -> tuple[str, list[Shown]]:
        c, h = self.c, self.head
        p = str(MapName(kind, l))
        g = h * c.H_kv // c.H
        nx = "ℓ_x" if c.arch == "edt" else "ℓ"
        nz = ("ℓ_z" if kind in ("cross", "enc") else "ℓ_x") if c.arch == "edt" else "ℓ"
        if kind == "enc":
            nx = "ℓ_z"
        def pt(what: str, key: tuple = (), view: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Source:
            return Source("point", f"{p}/{what}", key, view)
        if part == "qkv":
            return ("Each head projects the queries' stream and the keys' stream: Q^h ← W_q^h X, K^h ← W_k^h Z, "
                    "V^h ← W_v^h Z" + (" (Q, K rotated by RoPE)" if c.positions == "rope" and kind != "cross"
                                        else "") + (f"; head {h + 1} reads key/value head {g + 1}" if c.H_kv != c.H
                                                    else "") + ".",
                    [self.show("Q^h", f"d_attn×{nx}", pt("q", (h,))),
                     self.show("K^h", f"d_attn×{nz}", pt("k", (g,)), query=kind != "cross"),
                     self.show("V^h", f"d_mid×{nz}", pt("v", (g,)), query=kind != "cross")])
        if part == "scores":
            return ("S = K^hᵀQ^h / √d_attn: entry [t_z, t_x] is how well key t_z matches query t_x"
                    + {"alibi": ", minus ALiBi's m_h·|t - t′|", "relative": ", with Transformer-XL's terms"}.get(
                        c.positions if kind != "cross" else "", "") + ".",
                    [self.show("S", f"{nz}×{nx}", pt("scores", (h,)))])
        if part == "mask":
            return ("Where Mask[t_z, t_x] = 0 the score is set to -∞, so the softmax gives that key weight 0"
                    + (": a query sees only the keys up to itself." if p.startswith(("self", "dec"))
                       and c.arch in ("gpt", "gopher", "edt") else ": here Mask ≡ 1, every key is seen."),
                    [self.show("Mask", f"{nz}×{nx}", pt("mask", (0,), lambda t: (t == 0).double()))])
        if part == "softmax":
            return ("softmax over the keys, column by column: column t_x holds the weights query t_x gives each key; "
                    "it sums to 1.", [self.show("softmax(S)", f"{nz}×{nx}", pt("pattern", (h,)))])
        if part == "weighted":
            return ("Y^h = V^h softmax(S): each query's column is the weighted mean of the value columns.",
                    [self.show("Y^h", f"d_mid×{nx}", pt("z", (slice(None), h)))])
        return ("The heads' outputs are stacked, Y = [Y¹; …; Y^H], and projected back: W_o Y + b_o 1ᵀ.",
                [self.show("Y", f"H·d_mid×{nx}", pt("z", (), lambda t: t.reshape(t.shape[0], -1))),
                 self.show("W_o Y", f"d_e×{nx}", pt("out"))])


def _row(t: torch.Tensor) -> torch.Tensor:
    """A per-position number as the paper's row vector (1 × ℓ)."""
    return t[:, None]


# ------------------------------------------------------------------------------------------------- the loss
def loss_of(model: Transformer, logits: torch.Tensor, x: list[int], query: int) -> torch.Tensor:
    """The training loss of the paper for one sequence: Algorithm 13 (gpt, gopher) or 11 (edt),
    -Σ_{t<ℓ} log P[x[t+1], t]; Algorithm 12 (bert) -log P[x[t], t] over T̃ = {the query}."""
    logp = logits[0].double().log_softmax(-1)
    if isinstance(model, ETransformer):
        return -logp[query, x[query]]
    target = torch.tensor(x[1:], device=logp.device)
    return -logp[:-1].gather(1, target[:, None]).sum()


def _predicted(model: Transformer, x: list[int]) -> int:
    """How many tokens the loss predicts."""
    return 1 if isinstance(model, ETransformer) else len(x) - 1


def _run(model: Transformer, x: list[int], z: list[int] | None) -> torch.Tensor:
    dev = next(model.parameters()).device
    xt = torch.tensor([x], device=dev)
    kw = {"context": torch.tensor([z], device=dev)} if z is not None else {}
    out = model(xt, **kw)
    assert isinstance(out, torch.Tensor)
    return out


# ------------------------------------------------------------------------------------------------- the walk
def walk(model: Transformer, x: list[int], z: list[int] | None = None, query: int | None = None, head: int = 0,
         initial: Transformer | None = None) -> Walk:
    """The forward and backward steps of ``model`` on ``x`` (an edt's source ``z``) for the query position
    ``query`` (0-based; default the last one the loss scores, ℓ - 1) and head ``head``; ``initial``: the model
    at step 0 (its loss is shown in the first backward step)."""
    if isinstance(model, EDTransformer) and z is None:
        raise ValueError("an encoder-decoder needs a source sequence z.")
    if len(x) < 2:
        raise ValueError("the walk needs at least two tokens: the loss predicts one from another.")
    code = pseudocode(model.config)
    query = len(x) - 2 if query is None else query  # the last position the loss scores
    if not 0 <= query < len(x):
        raise ValueError(f"the query token is position {query + 1}, but the input has {len(x)} tokens.")
    head = min(max(head, 0), code.config.H - 1)
    steps = plan(code)
    names = hooks.point_names(model)
    m = copy.deepcopy(model).eval()  # eval mode without touching a model another thread may run
    with torch.inference_mode(), hooks.recorded(m, names) as seen:
        logits = _run(m, x, z)
    with torch.inference_mode():
        classes = m.classify(torch.tensor([x], device=logits.device)) if isinstance(m, ETransformer) \
            and m.class_head is not None else None
    assert classes is None or isinstance(classes, torch.Tensor)
    reader = _Reader(m, code, seen, logits, x, z, query, head, classes)
    forward = [reader.step(*s) for s in steps]

    f64 = copy.deepcopy(model).to("cpu", torch.float64).eval()
    with torch.enable_grad(), hooks.recorded(f64, names, copy=False) as kept:
        logits64 = _run(f64, x, z)
        for t in [logits64, *(t for ts in kept.values() for t in ts)]:
            if t.requires_grad:
                t.retain_grad()
        loss = loss_of(f64, logits64, x, query)
        loss.backward()
    assert logits64.grad is not None
    grads = _Reader(f64, code, {k: [t.grad for t in ts if t.grad is not None] for k, ts in kept.items()},
                    logits64.grad, x, z, query, head)
    grads.params = {k: p.grad for k, p in f64.named_parameters() if p.grad is not None}
    checker = _Checker(f64, x, z, query, [n for n in names if n.endswith("/pattern")])
    initial_loss = None if initial is None else float(loss_of(initial, _logits(initial, x, z), x, query))
    backward = [_loss_step(code, f64, loss.item(), x, initial_loss, reader)]
    for step in reversed(forward):
        shown = [g for g in (_gradient(grads, s) for s in step.shown) if g is not None]
        if shown:
            backward.append(replace(step, words=_backward_words(step, shown[-1], code), shown=shown,
                                    check=checker.check(shown[-1], grads)))
    return Walk(code, list(x), list(z) if z is not None else None, query, head, forward, backward, loss.item(),
                initial_loss, _predicted(f64, x))


_BACKWARD = {  # what the gradient does at each MHAttention part
    "out": "∂loss/∂Y = W_oᵀ ∂loss/∂(W_o Y): the gradient is split back among the heads' rows of Y.",
    "weighted": "Y^h = V^h softmax(S): ∂loss/∂V^h = ∂loss/∂Y^h softmax(S)ᵀ and ∂loss/∂softmax(S) = V^hᵀ ∂loss/∂Y^h.",
    "softmax": "Each column of softmax(S) gets V^hᵀ ∂loss/∂Y^h: how much more of each value the query would want.",
    "scores": "Through the softmax: ∂S = A ⊙ (∂A − 1 (1ᵀ(A ⊙ ∂A))) per column, A = softmax(S): 0 where the Mask hid a "
              "key (A = 0 there), so masked keys learn nothing from this query.",
    "qkv": "S = K^hᵀQ^h/√d_attn: ∂Q^h = K^h ∂S/√d_attn and ∂K^h = Q^h ∂Sᵀ/√d_attn; ∂V^h came from Y^h.",
}


def _backward_words(step: Step, g: Shown, code: Pseudocode) -> str:
    """What a backward step shows, in words."""
    if g.source.kind == "logits":
        right = "x[t]" if code.config.arch == "bert" else "x[t+1]"
        return (f"The softmax and the loss together have the simplest gradient: ∂loss/∂(W_u X)[:, t] = P[:, t] − the "
                f"one-hot vector of the right token {right} (blue: the right token, whose score the step pushes up; "
                "every other token's is pushed down by its probability).")
    if step.part:
        return _BACKWARD[step.part]
    if "_norm(" in step.text:
        mean = "its mean and " if code.config.norm == "layer" else ""
        return (f"Back through the norm: its gradient is the incoming one scaled by γ/√(v + ε), with {mean}its "
                "component along the normed vector taken out (the norm ignores those directions).")
    if " + " in step.text and "←" in step.text and step.text.split("←")[0].strip() in ("X", "Z"):
        return ("A residual add passes the gradient on unchanged to the stream before it, and the same gradient "
                "into the sublayer: ∂loss/∂X reaches every earlier layer directly.")
    if step.text.startswith("for t"):
        learned = " (and column t of W_p)" if code.config.positions == "learned" else ""
        return (f"The gradient of e_t lands on column x[t] of W_e{learned}: only the tokens in the input get one; a "
                "token used twice gets the sum.")
    return ("Back through this line: ∂loss/∂ each of its tensors, in the same shape as the tensor; the chain rule "
            "hands it on to the line before.")


def _logits(model: Transformer, x: list[int], z: list[int] | None) -> torch.Tensor:
    with torch.inference_mode():
        return _run(copy.deepcopy(model).eval(), x, z)


def _gradient(grads: _Reader, s: Shown) -> Shown | None:
    """``s``'s gradient ∂loss/∂s in the same layout (None: no gradient: the ids, the Mask, a norm's statistics,
    which the output is computed without, P, a table that is not trained)."""
    src = s.source
    if s.name in ("Mask", "P") or src.kind in ("ids", "class-logits") or (src.kind == "point" and not grads.seen.get(src.name)) \
            or (src.kind == "param" and src.name not in grads.params):
        return None
    return grads.show(f"∂loss/∂{s.name}", s.symbols, src)


class _Checker:
    """Central finite differences of the loss in float64, a tensor changed at its hook point (or a parameter)."""

    def __init__(self, model: Transformer, x: list[int], z: list[int] | None, query: int, patterns: list[str]) -> None:
        self.model, self.x, self.z, self.query, self.patterns = model, x, z, query, patterns
        self.base = self.loss(Source("logits"), 0, 0.0)

    def loss(self, s: Source, flat: int, delta: float) -> float:
        def moved(t: torch.Tensor) -> torch.Tensor:
            t = t.clone(memory_format=torch.contiguous_format)
            t.view(-1)[flat] += delta
            return t
        m = self.model
        with torch.no_grad(), hooks.recorded(m, self.patterns):  # the path the backward pass took
            if s.kind == "logits":
                return float(loss_of(m, moved(_run(m, self.x, self.z)), self.x, self.query))
            if s.kind == "param":
                p = dict(m.named_parameters())[s.name]
                p.view(-1)[flat] += delta
                try:
                    return float(loss_of(m, _run(m, self.x, self.z), self.x, self.query))
                finally:
                    p.view(-1)[flat] -= delta
            with hooks.hooked(m, {s.name: moved}):
                return float(loss_of(m, _run(m, self.x, self.z), self.x, self.query))

    def check(self, g: Shown, grads: _Reader) -> GradCheck:
        """``g``'s (a gradient's) largest entries against central differences."""
        s = g.source
        full = grads.tensor(s)
        ids = s.layout(torch.arange(full.numel()).reshape(full.shape))  # each entry's place in the whole tensor
        floor = 16 * float(np.finfo(np.float64).eps) * max(abs(self.base), 1.0) / H_STEP
        entries = []
        for o in np.argsort(-np.abs(g.values), axis=None)[:CHECKED]:
            at = tuple(int(i) for i in np.unravel_index(o, g.values.shape))
            a, flat = float(g.values[at]), int(ids[at])
            num = (self.loss(s, flat, H_STEP) - self.loss(s, flat, -H_STEP)) / (2 * H_STEP)
            entries.append((at, a, num, abs(a - num) / max(abs(a), abs(num), floor)))
        return GradCheck(g.name, entries, floor)


def _picked(t: torch.Tensor, targets: list[int]) -> torch.Tensor:
    """log P[target, t] of each position (a column)."""
    return t.log_softmax(-1).gather(1, torch.tensor(targets, device=t.device)[:, None])


def _loss_step(code: Pseudocode, model: Transformer, loss: float, x: list[int], initial: float | None,
               reader: _Reader) -> Step:
    """The first backward step: the loss, each position's term of it, and why a model at step 0 has ≈ ln N_V per
    token."""
    c = code.config
    n = _predicted(model, x)
    ln = math.log(c.vocab_size)
    words = (f"The loss is −Σ log P[the right token, t] over the {n} predicted token{'s' * (n != 1)}: "
             f"{loss:.4f} nats, {loss / n:.4f} per token. At step 0 the weights are small and random, so P is "
             f"nearly uniform over the N_V = {c.vocab_size} tokens and each prediction costs ≈ −log(1/N_V) = "
             f"ln {c.vocab_size} = {ln:.4f} nats.")
    if initial is not None:
        words += (f" The model at step 0 (this configuration and seed) has {initial / n:.4f} per token on this "
                  "input.")
    ret = next(i for i, line in enumerate(code.lines) if line.tap is not None and line.tap.point == "logits")
    alg = {8: 11, 9: 12, 10: 13}[code.lines[0].algorithm or 10]
    if isinstance(model, ETransformer):
        q = reader.query
        terms = reader.show("−log P[x[t], t]", "1×1", Source("logits", key=(slice(q, q + 1),),
                                                             view=lambda t: -t.log_softmax(-1)[:, x[q]][:, None]))
    else:
        words += " Column ℓ predicts no token of x, so the loss and every gradient there are 0."
        terms = reader.show("−log P[x[t+1], t]", "1×(ℓ-1)", Source("logits", key=(slice(0, len(x) - 1),),
                                                                      view=lambda t: -_picked(t, x[1:])))
    return Step(ret, None, "", f"The loss (Algorithm {alg})", code.lines[ret].text.strip(), words, [terms])
