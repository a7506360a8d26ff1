"""Glass-box models: run folders whose weights are set by hand, not trained, so that what they compute is known
and the inspection tools can be checked against it (``fatstudio glass-box induction|superposition --out DIR``;
the app's Runs list: "Add glass-box model"). They are written as an imported run is (config.json, meta.json,
tokenizer.json, model.safetensors with its checksum; meta.json's ``glass_box`` names the model and its
``description`` explains the construction), so every command and view opens them.

Both read the "repeat" corpus (random letters, each sequence written twice) with the char tokenizer, as gpt models
(pre-LN layer norms). Every matrix that reads a normed stream has rows summing to 0 (coordinate ``C``, never
written, takes the rest), so the norm's centring changes nothing it reads, and a large constant coordinate (the
ballast, read by nothing) makes the norm's σ nearly the same at every position: each read is the stream / σ.

- ``induction``: layer 1's head 1 is a previous-token head, layer 2's head 1 an induction head (`_induction`);
- ``superposition``: a one-layer model whose MLP writes K known directions, more than d_e, each active on a few
  of the 26² letter pairs (`_superposition`); they are saved in the run (`FEATURES`), and `recovered_features`
  says which of them a dictionary (an SAE or a transcoder) found.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..config import DataConfig, ModelConfig, RunConfig
from ..data.builtin import REPEAT_ALPHABET
from ..data.tokenization import Tokenizer, train_tokenizer
from ..files import Damaged, atomic_write, read_bytes, sealed, unsealed, verify
from ..temporary import made_beside
from .folder import Run

if TYPE_CHECKING:
    from ..inspect.features.dictionary import Dictionary

KINDS = ("induction", "superposition")
FEATURES = "known_features.safetensors"  # a superposition run's known directions (K, d_e), with its checksum
FEATURES_POINT = "mlp/0/out"  # where they are written: the MLP's output
FOUND = 0.9  # the cosine at which a dictionary's feature counts as one of the known directions
BALLAST = 8.0  # the constant coordinate that keeps σ nearly constant
F = 5  # position frequencies


class _Stream:
    """The residual stream's coordinates, handed out by name, and the weights of a model of ``cfg``, all zero
    but the norms' γ (1)."""

    def __init__(self, cfg: ModelConfig, V: int):
        from ..model import build_empty

        self.cfg, self.d_e, self.next = cfg, cfg.d_e, 0
        self.model = build_empty(cfg, "cpu")
        self.w = {k: torch.zeros_like(v) for k, v in self.model.state_dict().items()}
        for name, t in self.w.items():
            if name.endswith("gamma"):
                t.fill_(1.0)
        self.TOK, self.POS, self.PREV = self.take(V), self.take(4 * F), self.take(V)

    def take(self, n: int) -> list[int]:
        self.next += n
        if self.next > self.d_e - 2:  # the last two: C and the ballast
            raise ValueError("the residual stream is too narrow for the construction")
        return list(range(self.next - n, self.next))

    @property
    def C(self) -> int:
        return self.d_e - 2

    @property
    def BALLAST(self) -> int:
        return self.d_e - 1

    def sigma(self, ones: int) -> float:
        """σ of the stream where, besides the ballast and the positions (norm² 2F, sum 0), ``ones`` one-hot
        vectors are written."""
        sq, total = BALLAST**2 + 2 * F + ones, BALLAST + ones
        return math.sqrt(sq / self.d_e - (total / self.d_e) ** 2)

    def set(self, name: str, rows: list[int], cols: list[int], M: np.ndarray | float) -> None:
        """Rows ``rows`` of weight ``name`` read (or write) coordinates ``cols`` by M."""
        M = np.array(np.broadcast_to(M, (len(rows), len(cols))), dtype=np.float32)
        self.w[name][torch.tensor(rows)[:, None], torch.tensor(cols)] = torch.from_numpy(M)

    def balance(self, *names: str) -> None:
        """Rows of these matrices (reading a normed stream) sum to 0: C takes the rest."""
        for name in names:
            W = self.w[name]
            W[:, self.C] -= W.sum(1)

    def embed(self, l_max: int) -> None:
        """W_e: the token one-hot and the ballast; W_p: cos ω_f t, sin ω_f t and their negatives (sum 0, norm² 2F)."""
        V = len(self.TOK)
        self.set("embed.W_e.weight", list(range(V)), self.TOK, np.eye(V))
        self.set("embed.W_e.weight", list(range(V)), [self.BALLAST], BALLAST)
        cs = _cos_sin(np.arange(l_max), _frequencies(l_max))
        self.set("embed.W_p.weight", list(range(l_max)), self.POS, np.concatenate([cs, -cs], 1))

    def previous_token_head(self, sharp: float) -> None:
        """Layer 0, head 0: query i scores key j by ``sharp`` · mean_f cos ω_f (i - 1 - j), largest at j = i - 1
        (the slowest frequency turns half a circle over the context: nothing aliases), and copies its token's
        one-hot into PREV."""
        cfg, s = self.cfg.resolved(), self.sigma(1)
        omega = _frequencies(cfg.l_max)
        rot = np.zeros((2 * F, 2 * F))
        for f, om in enumerate(omega):  # q = (cos ω(i-1), sin ω(i-1)), k = (cos ωj, sin ωj)
            rot[2 * f:2 * f + 2, 2 * f:2 * f + 2] = [[np.cos(om), np.sin(om)], [-np.sin(om), np.cos(om)]]
        gain = math.sqrt(sharp / F * math.sqrt(cfg.d_attn)) * s
        pos, V = self.POS[:2 * F], len(self.TOK)
        a = "layers.0.attn."
        self.set(a + "W_q.weight", list(range(2 * F)), pos, gain * rot)
        self.set(a + "W_k.weight", list(range(2 * F)), pos, gain * np.eye(2 * F))
        self.set(a + "W_v.weight", list(range(V)), self.TOK, s * np.eye(V))
        self.set(a + "W_o.weight", self.PREV, list(range(V)), np.eye(V))
        self.balance(a + "W_q.weight", a + "W_k.weight", a + "W_v.weight")

    def built(self):
        self.model.load_state_dict(self.w)
        return self.model.eval()


def _frequencies(l_max: int) -> np.ndarray:
    """ω_f = 2π·2^f / (2 ℓ_max), f = 0 … F-1."""
    return 2 * np.pi * 2.0 ** np.arange(F) / (2 * l_max)


def _cos_sin(t: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """(len(t), 2F): cos ω_f t, sin ω_f t for each f in turn."""
    return np.stack([np.cos(np.outer(t, omega)), np.sin(np.outer(t, omega))], -1).reshape(len(t), -1)


def _letters() -> tuple[Tokenizer, list[int]]:
    """The "repeat" corpus's char tokenizer (as training makes it) and the ids of its letters."""
    tokenizer = train_tokenizer("char", [REPEAT_ALPHABET])
    return tokenizer, [tokenizer.encode(c)[0] for c in REPEAT_ALPHABET]


# ---- the induction model ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Induction:
    """The induction glass box's numbers (`INDUCTION_TEXT` says what each does)."""

    l_max: int = 32
    sharp: float = 60.0  # the previous-token head's score margin
    match: float = 8.0  # the induction head's score for a key after the query's token
    lo: int = 3  # its window of distances (the repeat corpus's earlier copies)
    hi: int = 11
    near: float = 3.0  # its score for a key in that window
    confidence: float = 5.0  # the copied letter's logit above the others
    specials: float = 10.0  # the specials' logits below the letters'


INDUCTION_TEXT = (
    "A glass-box model, built by hand (fatstudio glass-box induction), not trained: a 2-layer gpt (d_e = 128, 4 heads "
    "a layer, ℓ_max = {l_max}) on the repeat corpus. Layer 1 head 1 is a previous-token head: query i attends to key "
    "i − 1 (scores {sharp:g}·mean_f cos ω_f(i − 1 − j) over {F} position frequencies of W_p) and copies that token's "
    "one-hot into its own coordinates of the stream. Layer 2 head 1 is an induction head: query i (token a) scores "
    "key j by {match:g} when the token before j was a (its query reads the token, its key the previous-token head's "
    "copy), plus up to {near:g} for keys {lo}–{hi} back (the repeat corpus's sequences are 4–12 letters, so an "
    "earlier copy lies there), and copies key j's token into the coordinates the unembedding reads, {confidence:g} "
    "nats above the other letters: it predicts the letter that followed a's earlier occurrence. The other six heads "
    "attend evenly and write nothing (their W_o columns are 0), the MLPs are 0, and <pad>, <mask>, <bos> and <eos> "
    "are never predicted. Zeroing either constructed head leaves the second copies nearly as unpredictable as the first. "
    "Try it on a prompt of letters only (its vocabulary is a–z), a word repeated: \"catsatonmatcatsatonmat\" (its "
    "second copy is predicted from the first: its loss per token is far below the first copy's).")


def _induction(p: Induction = Induction()) -> tuple[torch.nn.Module, Tokenizer, RunConfig, str]:
    """The induction glass box (see `INDUCTION_TEXT`), its tokenizer, config and description."""
    tokenizer, letters = _letters()
    V = tokenizer.vocab_size
    l_max, lo, hi = p.l_max, p.lo, p.hi
    cfg = ModelConfig(arch="gpt", vocab_size=V, l_max=l_max, L=2, H=4, d_e=128, d_mlp=4, d_attn=40, d_mid=40)
    r = cfg.resolved()
    s = _Stream(cfg, V)
    OUT = s.take(V)
    s.embed(l_max)
    s.previous_token_head(p.sharp)
    # layer 1, head 0: score(i, j) = match·[x_i = x_{j-1}] + near·g(i - j), g ≈ 1 on lo…hi back, ≈ 0 elsewhere
    t, omega = np.arange(l_max), _frequencies(l_max)
    target = ((t >= lo) & (t <= hi)).astype(float)
    basis = np.concatenate([_cos_sin(t, omega), np.ones((l_max, 1))], 1)
    coef = np.linalg.lstsq(basis, target, rcond=None)[0]  # g(δ) = Σ_f c_f cos ω_f δ + s_f sin ω_f δ (+ a constant)
    g = np.zeros((2 * F, 2 * F))
    for f in range(F):  # q = (c cos ωi + s sin ωi, c sin ωi - s cos ωi), k = (cos ωj, sin ωj)
        c, sn = coef[2 * f], coef[2 * f + 1]
        g[2 * f:2 * f + 2, 2 * f:2 * f + 2] = [[c, sn], [-sn, c]]
    s1, root = s.sigma(2), math.sqrt(math.sqrt(r.d_attn))
    a, n = "layers.1.attn.", len(letters)
    s.set(a + "W_q.weight", list(range(n)), [s.TOK[i] for i in letters], math.sqrt(p.match) * root * s1 * np.eye(n))
    s.set(a + "W_k.weight", list(range(n)), [s.PREV[i] for i in letters], math.sqrt(p.match) * root * s1 * np.eye(n))
    rows = list(range(n, n + 2 * F))
    s.set(a + "W_q.weight", rows, s.POS[:2 * F], math.sqrt(p.near) * root * s1 * g)
    s.set(a + "W_k.weight", rows, s.POS[:2 * F], math.sqrt(p.near) * root * s1 * np.eye(2 * F))
    s.set(a + "W_v.weight", list(range(V)), s.TOK, s1 * np.eye(V))
    s.set(a + "W_o.weight", OUT, list(range(V)), np.eye(V))
    s.balance(a + "W_q.weight", a + "W_k.weight", a + "W_v.weight")
    # the unembedding: a letter's logit is `confidence` times its share of the induction head's copy; the specials
    # read the ballast: a large negative constant
    s2 = s.sigma(3)
    s.set("unembed.W_u.weight", letters, [OUT[i] for i in letters], p.confidence * s2 * np.eye(n))
    others = [i for i in range(V) if i not in letters]
    s.set("unembed.W_u.weight", others, [s.BALLAST], -p.specials * s2 / BALLAST)
    s.balance("unembed.W_u.weight")
    text = INDUCTION_TEXT.format(F=F, **asdict(p))
    return s.built(), tokenizer, _config(cfg), text


def _config(cfg: ModelConfig) -> RunConfig:
    """A glass box's run config: its model on the repeat corpus, char tokens (training's other defaults)."""
    return RunConfig(cfg, DataConfig(corpus="repeat", tokenizer="char"))


# ---- the superposition model -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Superposition:
    """The superposition glass box's numbers (`SUPERPOSITION_TEXT`)."""

    K: int = 128  # known features
    d_e: int = 96  # fewer dimensions
    per_pair: int = 3  # features active at each letter pair
    seed: int = 0  # of the directions and the pairs' features


SUPERPOSITION_TEXT = (
    "A glass-box model, built by hand (fatstudio glass-box superposition), not trained: a 1-layer gpt (d_e = {d_e}, "
    "ReLU MLP of d_mlp = 676) on the repeat corpus whose MLP writes K = {K} known features, more than its d_e = "
    "{d_e} dimensions (in superposition: K random unit directions u_1 … u_K of the stream). Head 1 is a "
    "previous-token head (it copies the token before into the stream). Each of the MLP's 26² units fires (1) exactly "
    "when the previous letter is p and the current letter c, and writes Σ m·u_k over {per_pair} features k drawn for "
    "the pair (p, c), each with a magnitude m between 0.5 and 1.5: every feature is active on about "
    "{per_feature:.0f} of the 676 letter pairs, {per_pair} features at each token. The directions and each pair's "
    "activations are saved in known_features.safetensors; a dictionary trained on mlp/0/out (or a transcoder of "
    "mlp/0) can be checked against them (the Features tab shows which it found). The unembedding reads the stream "
    "through fixed random weights: the model predicts nothing useful; it exists for its features.")


def _superposition(p: Superposition = Superposition()) -> tuple[torch.nn.Module, Tokenizer, RunConfig, str,
                                                                 dict[str, torch.Tensor]]:
    """The superposition glass box (see `SUPERPOSITION_TEXT`), its tokenizer, config, description and known
    features: ``directions`` (K, d_e), unit rows, and ``activations`` (26, 26, K), feature k's activation when the
    previous letter is p and the current c."""
    K, d_e, per_pair = p.K, p.d_e, p.per_pair
    tokenizer, letters = _letters()
    V, n = tokenizer.vocab_size, len(letters)
    cfg = ModelConfig(arch="gpt", vocab_size=V, l_max=32, L=1, H=4, d_e=d_e, d_mlp=n * n, d_attn=32, d_mid=32,
                      activation="relu")
    s = _Stream(cfg, V)
    s.embed(cfg.l_max)
    s.previous_token_head(Induction.sharp)
    rng = np.random.default_rng(p.seed)
    u = rng.standard_normal((K, d_e))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    acts = np.zeros((n, n, K))
    for a in range(n):
        for b in range(n):
            acts[a, b, rng.choice(K, per_pair, replace=False)] = rng.uniform(0.5, 1.5, per_pair)
    s1 = s.sigma(2)
    units = list(range(n * n))  # unit a·26 + b: previous letter a, current b; pre-activation PREV_a + TOK_b - 1
    s.set("layers.0.mlp.W_mlp1.weight", units, [s.PREV[i] for i in letters], s1 * np.repeat(np.eye(n), n, 0))
    s.set("layers.0.mlp.W_mlp1.weight", units, [s.TOK[i] for i in letters], s1 * np.tile(np.eye(n), (n, 1)))
    s.w["layers.0.mlp.W_mlp1.bias"][:] = -1.0
    s.balance("layers.0.mlp.W_mlp1.weight")
    s.w["layers.0.mlp.W_mlp2.weight"][:] = torch.tensor(acts.reshape(n * n, K) @ u, dtype=torch.float32).T
    s.w["unembed.W_u.weight"][:] = torch.tensor(rng.standard_normal((V, d_e)) * s.sigma(5) / math.sqrt(d_e),
                                                dtype=torch.float32)
    s.balance("unembed.W_u.weight")
    text = SUPERPOSITION_TEXT.format(per_feature=n * n * per_pair / K, **asdict(p))
    known = {"directions": torch.tensor(u, dtype=torch.float32), "activations": torch.tensor(acts, dtype=torch.float32)}
    return s.built(), tokenizer, _config(cfg), text, known


# ---- the run folder ----------------------------------------------------------------------------------------------
@dataclass
class GlassBox:
    """What `build_glass_box` wrote: the run folder, which model and its description."""

    run_dir: Path
    kind: str
    description: str

    def summary(self) -> str:
        return f"built the {self.kind} glass-box model as the run {self.run_dir} (hand-set weights, not trained)"


def build_glass_box(kind: str, out: str | Path) -> GlassBox:
    """Write the glass-box model ``kind`` (`KINDS`) as a new run ``out`` (absent or empty: never over an earlier run),
    whole or not at all, as `import_hf` writes one; a superposition run also holds its known features (`FEATURES`)."""
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is not a glass-box model; choose one of {', '.join(KINDS)}.")
    out = Path(out)
    Run.check_new(out)
    if kind == "induction":
        model, tokenizer, config, text = _induction()
        known = None
    else:
        model, tokenizer, config, text, known = _superposition()
    out.parent.mkdir(parents=True, exist_ok=True)
    with made_beside(out, folder=True) as tmp:  # renamed into place whole; hidden, never listed meanwhile
        run = Run.create(config, tmp.parent, tmp.name)
        run.save_tokenizer(tokenizer)
        run.save_checkpoint(model, None, 0, {})
        if known is not None:
            from safetensors.torch import save

            atomic_write(tmp / FEATURES, sealed(save(known, metadata=unsealed({"point": FEATURES_POINT}))))
        run.write_meta(status="finished", glass_box=kind, description=text, finished=time.time())
        if out.exists():
            out.rmdir()  # empty (Run.check_new)
        os.replace(tmp, out)
    return GlassBox(out, kind, text)


def known_features(run: Run) -> torch.Tensor | None:
    """The known directions (K, d_e) of a superposition glass box, unit rows, checked against their checksum; None
    for a run without them."""
    from safetensors.torch import load

    path = run.path / FEATURES
    if not path.exists():
        return None
    if not verify(path):  # files.Damaged naming the file if it was changed
        raise Damaged(f"{path} carries no checksum, though fatstudio writes one: it was replaced since.")
    try:
        u = load(read_bytes(path))["directions"]
    except Exception as e:  # safetensors' own errors, a missing tensor
        raise ValueError(f"{path} is not the known features of a glass box: {e}") from None
    if u.ndim != 2 or u.shape[1] != run.config.model.d_e:
        raise ValueError(f"{path} holds directions of shape {tuple(u.shape)}; the run's d_e is {run.config.model.d_e}.")
    return u


@dataclass
class Recovery:
    """For each known feature (0-based), the dictionary feature whose decoder column is closest (``match``) and
    their cosine (``cosine``); found at ``cosine ≥ threshold``."""

    point: str  # where the dictionary writes
    cosine: list[float]
    match: list[int]
    threshold: float

    @property
    def found(self) -> list[int]:
        return [i for i, c in enumerate(self.cosine) if c >= self.threshold]

    @property
    def missed(self) -> list[int]:
        return [i for i, c in enumerate(self.cosine) if c < self.threshold]

    @property
    def fraction(self) -> float:
        return len(self.found) / max(1, len(self.cosine))

    def summary(self) -> str:
        return (f"found {len(self.found)} of the {len(self.cosine)} known features ({self.fraction:.0%}) at cosine ≥ "
                f"{self.threshold:g}; median best cosine {float(np.median(self.cosine)):.3f}")


def recovered_features(dictionary: Dictionary, run: Run | str | Path, threshold: float = FOUND) -> Recovery:
    """Which of a superposition glass box's known features ``dictionary`` (an SAE or transcoder writing a point of
    width d_e, such as mlp/0/out) found: for each, the best cosine between its direction and a decoder column W_dec[:, i].
    A ValueError for a run without known features or a dictionary of another width."""
    run = run if isinstance(run, Run) else Run.open(run)
    u = known_features(run)
    if u is None:
        raise ValueError(f"{run.name} has no known features to compare with; build one with "
                         "fatstudio glass-box superposition.")
    W = dictionary.W_dec.detach().to("cpu", torch.float32)
    if W.shape[0] != u.shape[1]:
        raise ValueError(f"the dictionary writes {dictionary.point_out} of width {W.shape[0]}; the known features "
                         f"are directions of the stream (d_e = {u.shape[1]}).")
    cos = u @ (W / W.norm(dim=0, keepdim=True).clamp(min=1e-12))  # (K, d_f)
    best, match = cos.max(1)
    return Recovery(dictionary.point_out, [float(c) for c in best], [int(i) for i in match], threshold)
