""""Is this normal?": small, robust rules that read a run's metrics rows (and a probe's attention maps) and
flag what a person watching the curves should know, each with one line of advice.

Qt-free (numpy only). `diagnose` (`Diagnosis` for a run that grows) takes the metrics.jsonl rows so far (``step``, ``train_loss``,
``grad_norm`` — None where loss scaling skipped a step — ``lr``, and ``val_loss`` / ``eval_train_loss`` /
``accuracy`` on evaluation rows, see `runs`) and returns `Finding`s, oldest first. The rules, each one function below:

- `non_finite`: a train loss (or gradient norm) that is NaN or ±inf.
- `spikes`: a step's train loss above the median of the previous ``SPIKE_WINDOW`` steps by more than
  ``SPIKE_MADS`` robust standard deviations (σ̂ = 1.4826 · the median absolute deviation, σ for Gaussian
  noise) and by at least ``SPIKE_MIN_NATS`` (median and MAD, not mean and standard deviation, so one spike
  does not hide the next; the floor keeps the small wiggles of a smooth, converged curve from counting).
- `overfitting`: validation loss rising while the training loss falls for ``OVERFIT_EVALS`` consecutive
  evaluations, rising by at least ``OVERFIT_MIN_RISE`` nats over them.
- `unigram_plateau`: after warm-up, the median train loss of the last ``PLATEAU_STEPS`` steps within
  ``PLATEAU_NATS`` of the corpus's unigram entropy (`unigram_entropy`), and flat (the medians of their two
  halves within ``PLATEAU_NATS`` of each other): the model predicts token frequencies and nothing more.
- `split_mismatch`: the validation text's token frequencies unlike the training text's (`splits.SplitGap.marked`:
  a total variation of at least ``splits.GAP_TV`` and ``splits.GAP_CHANCE`` times what two samples of one text
  show), as the trainer measured them on the two splits (meta.json's ``split_gap``): a gap between the two losses
  is then no sign of overfitting alone (a folder of German then Russian files, split at its tail).
- `clipping` (a note, not a warning): the gradient norm above ``grad_clip`` on at least ``CLIP_FRACTION`` of
  the last ``CLIP_STEPS`` steps, the first ``CLIP_STEPS`` steps and warm-up left out (large early gradients
  are normal). A tight clip does that on purpose (the BERT presets clip on every step); only with spikes or a
  stalled loss does it mean the learning rate is too high, and those rules say so.

`dead_heads` checks one `AttentionMaps` (e.g. a run's probe at an evaluation step), each kind in one line
naming its heads as the app does (layers and heads from 1, `MapName.label`): heads whose every
query puts (almost) all its weight on the same key (a warning: a position sink), or spreads it (almost)
uniformly (a note). `head_findings` is what a run's Diagnostics list shows of them: dead heads always,
uniform heads only from step ``UNIFORM_AFTER`` on (every head starts out uniform). The trainer sends them
with each evaluation's probe maps (`training.Probe.findings`); `latest_head_findings` reads them from a run
folder's latest saved probe. Once the latest evaluation shows the task solved (`Diagnosis.solved`) they are
not listed: how a head attends is no concern then.

With no warning, `Diagnosis.summary` says what was checked ("Nothing unusual at step N: …").

What a preset expects. A preset may say which findings are normal at its settings, and why (its ``[expected]``
table, `presets.expected_findings`: the grokking preset's loss spikes). `Diagnosis` takes them as ``expected``
(finding kind → reason) and lists such findings as notes, with the reason, not as warnings, unless they go past
what was expected: a spike is expected only if the loss comes back (`recovered`: within ``SPIKE_RECOVERY_STEPS``
steps, to within ``SPIKE_RECOVERED_NATS`` of the median before it); one that stays up is a warning still.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from ..data.splits import SplitGap
from ..data.stats import unigram_entropy
from ..inference.attention_maps import AttentionMaps
from ..inspect.probes import list_probes, load_probe_file
from ..names import MapName
from ..records import ACCURACY, GRAD_NORM, TRAIN_LOSS, VAL_LOSS, eval_train_loss, is_evaluated, row_number, row_step

SPIKE_WINDOW = 50  # steps of history a spike is measured against
SPIKE_MIN_HISTORY = 20  # no spike is called before this many earlier steps
SPIKE_MADS = 5.0  # robust standard deviations, 1.4826 · MAD each
MAD_TO_SIGMA = 1.4826
SPIKE_MIN_NATS = 1.0
SPIKE_MAX_FINDINGS = 5  # the latest spikes only: a list of fifty would say nothing more
SPIKE_RECOVERY_STEPS = 50  # an expected spike comes back within this many steps…
SPIKE_RECOVERED_NATS = 0.5  # …to within this of the median loss before it
OVERFIT_EVALS = 3
OVERFIT_MIN_RISE = 0.02
PLATEAU_STEPS = 100
PLATEAU_NATS = 0.05
CLIP_STEPS = 100
CLIP_FRACTION = 0.9
DEAD_ENTROPY_NATS = 0.1  # a query this sure looks at one key
UNIFORM_FRACTION = 0.98  # of log(visible keys): a query this spread out does not look
UNIFORM_AFTER = 500  # steps: a head still uniform this late is worth a line (before, it is how heads start)
SOLVED_ACCURACY = 0.99  # validation accuracy from which a task counts as solved: its heads are not judged
SOLVED_NATS = 0.01  # likewise, validation loss (nats per token)


FindingKind = Literal["non_finite", "spike", "overfitting", "unigram_plateau", "split_mismatch", "clipping", "dead_head",
                      "uniform_head"]


@dataclass(frozen=True)
class Finding:
    """One thing to know: its ``kind`` (the rule that found it), the step it concerns, and one line of advice.
    ``warning``: something to act on; else a note (what the curves or maps show, nothing wrong in itself).
    ``heads``: the (map name, h) of the heads a head finding is about, h from 0. ``seen``: what was seen, without
    the advice (a spike's "the loss spiked to 3.03 (recent median 0.14)"), for a preset's expected note."""

    kind: FindingKind
    step: int
    advice: str
    warning: bool = True
    heads: tuple[tuple[MapName, int], ...] = ()
    seen: str = ""

    @property
    def line(self) -> str:
        return f"step {self.step:,} · {self.advice}"


def _losses(rows: Sequence[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(steps, train losses) of the rows that have a train loss."""
    pairs = [(row_step(r), v) for r in rows if (v := row_number(r, TRAIN_LOSS)) is not None]
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0)
    steps, losses = zip(*pairs)
    return np.asarray(steps, np.int64), np.asarray(losses, np.float64)


# ---- the rules --------------------------------------------------------------------------------------------
def non_finite(rows: Sequence[dict]) -> list[Finding]:
    """The first row whose train loss or gradient norm is NaN or infinite (training cannot go on from it)."""
    for r in rows:
        loss, norm = row_number(r, TRAIN_LOSS), row_number(r, GRAD_NORM)
        for what, value in (("loss", loss), ("gradient norm", norm)):
            if value is not None and not math.isfinite(value):
                return [Finding("non_finite", row_step(r),
                                f"the {what} became {value}: lower the learning rate, add gradient clipping or a "
                                "longer warm-up, or train in fp32.")]
    return []


def spikes(rows: Sequence[dict]) -> list[Finding]:
    """Steps whose loss exceeds the median m of the previous SPIKE_WINDOW finite losses by more than
    max(SPIKE_MADS·1.4826·MAD, SPIKE_MIN_NATS), MAD = median |loss - m| (needs SPIKE_MIN_HISTORY earlier
    steps).
    Consecutive spiking steps count once (the first); the latest SPIKE_MAX_FINDINGS are kept."""
    steps, losses = _losses(rows)
    keep = np.isfinite(losses)
    steps, losses = steps[keep], losses[keep]
    if len(losses) <= SPIKE_MIN_HISTORY:
        return []
    found: list[Finding] = []
    # each step i ≥ SPIKE_MIN_HISTORY against its previous ≤ SPIKE_WINDOW losses, all at once
    padded = np.concatenate([np.full(SPIKE_WINDOW, np.nan), losses])
    windows = np.lib.stride_tricks.sliding_window_view(padded, SPIKE_WINDOW)[:len(losses)]  # losses[i-W:i]
    windows = windows[SPIKE_MIN_HISTORY:]
    med = np.nanmedian(windows, axis=1)
    mad = np.nanmedian(np.abs(windows - med[:, None]), axis=1)
    current = losses[SPIKE_MIN_HISTORY:]
    spiking = current > med + np.maximum(SPIKE_MADS * MAD_TO_SIGMA * mad, SPIKE_MIN_NATS)
    previous = np.concatenate([[False], spiking[:-1]])
    for i in np.flatnonzero(spiking & ~previous):
        seen = f"the loss spiked to {current[i]:.2f} (recent median {med[i]:.2f})"
        found.append(Finding("spike", int(steps[SPIKE_MIN_HISTORY + i]),
                             f"{seen}: if it recurs, lower the learning rate or clip gradients.", seen=seen))
    return found[-SPIKE_MAX_FINDINGS:]


def recovered(rows: Sequence[dict], step: int) -> bool | None:
    """Whether the train loss came back after a spike at ``step`` (among ``rows``): some loss of the next
    SPIKE_RECOVERY_STEPS steps within SPIKE_RECOVERED_NATS of the median of the SPIKE_WINDOW before it. None
    while fewer steps follow and none has come back yet, or when ``step`` is not among the rows."""
    steps, losses = _losses(rows)
    at = np.flatnonzero(steps == step)
    if not at.size:
        return None
    i = int(at[0])
    before = losses[max(0, i - SPIKE_WINDOW):i]
    before = before[np.isfinite(before)]
    if not before.size:
        return None
    after = losses[i + 1:i + 1 + SPIKE_RECOVERY_STEPS]
    if (after <= np.median(before) + SPIKE_RECOVERED_NATS).any():
        return True
    return False if len(after) >= SPIKE_RECOVERY_STEPS else None


def as_expected(found: Finding, reason: str, came_back: bool | None = None) -> Finding:
    """``found`` as a preset that expects its kind says it: a note with ``reason``; but a spike that did not
    come back (``came_back`` False, `recovered`) stays a warning, for that was not expected."""
    seen = found.seen or found.advice.rstrip(".")
    if found.kind == "spike" and came_back is False:
        return Finding(found.kind, found.step, f"{seen} and has not come back in {SPIKE_RECOVERY_STEPS} steps, "
                       f"which even this preset's spikes do: lower the learning rate or clip gradients.",
                       seen=found.seen)
    back = " and came back" if found.kind == "spike" and came_back else ""
    return Finding(found.kind, found.step, f"{seen}{back}: expected with this preset ({reason}).", warning=False,
                   heads=found.heads, seen=found.seen)


def overfitting(rows: Sequence[dict]) -> list[Finding]:
    """Evaluations where validation loss rose and the training loss (the evaluation's ``eval_train_loss``,
    else the step's) fell, OVERFIT_EVALS times in a row and by OVERFIT_MIN_RISE nats in all: one finding
    per such streak, at its last evaluation."""
    evals = [(row_step(r), v, t) for r in rows
             if (v := row_number(r, VAL_LOSS)) is not None
             and (t := eval_train_loss(r)) is not None]
    found: list[Finding] = []
    run = 0
    for i in range(1, len(evals)):
        (_, v0, t0), (step, v1, t1) = evals[i - 1], evals[i]
        run = run + 1 if (v1 > v0 and t1 < t0) else 0
        streak_end = run >= OVERFIT_EVALS and (i + 1 == len(evals) or not (
            evals[i + 1][1] > v1 and evals[i + 1][2] < t1))
        if streak_end and v1 - evals[i - run][1] >= OVERFIT_MIN_RISE:
            found.append(Finding("overfitting", step,
                                 f"validation loss rose {run} evaluations in a row while training loss fell "
                                 "(overfitting): use more data, dropout or weight decay, or fewer steps."))
    return found


def unigram_plateau(rows: Sequence[dict], entropy: float | None, warmup: int = 0) -> list[Finding]:
    """The last PLATEAU_STEPS steps, all after warm-up: their median loss within PLATEAU_NATS of the unigram
    entropy, and the medians of their first and second half within PLATEAU_NATS of each other (flat)."""
    if entropy is None or not math.isfinite(entropy):
        return []
    steps, losses = _losses(rows)
    if len(losses) < PLATEAU_STEPS:
        return []
    steps, last = steps[-PLATEAU_STEPS:], losses[-PLATEAU_STEPS:]
    if steps[0] <= warmup or not np.isfinite(last).all():
        return []
    half = PLATEAU_STEPS // 2
    if (abs(np.median(last) - entropy) <= PLATEAU_NATS
            and abs(np.median(last[:half]) - np.median(last[half:])) <= PLATEAU_NATS):
        return [Finding("unigram_plateau", int(steps[-1]),
                        f"the loss sits at the corpus's unigram entropy ({entropy:.2f} nats): the model only "
                        "predicts token frequencies; try a lower learning rate or a longer warm-up, or check "
                        "the task.")]
    return []


def split_mismatch(split: dict | None) -> list[Finding]:
    """The validation split's text unlike the training split's (``split``: meta.json's ``split_gap``, a
    `SplitGap`'s numbers and the rule ``data.split``), at step 0: it holds from the start."""
    gap = SplitGap.from_dict(split)
    if gap is None or not gap.marked:
        return []
    rule = split.get("rule") if isinstance(split, dict) else None
    why = ('data.split = "tail" validates on the corpus\'s last part (of a folder, its last files); "blocks" '
           "spreads it over the whole corpus." if rule == "tail" else
           "check that the corpus is one kind of text, or give each kind its own run.")
    return [Finding("split_mismatch", 0,
                    f"the validation text is unlike the training text: their token frequencies differ by a total "
                    f"variation of {gap.tv:.2f} (two samples of one text this size differ by about {gap.chance:.2f}),"
                    f" and a model of the training text's frequencies loses {gap.kl:.2f} nats a token more on it. "
                    f"A validation loss above the training loss then says little of overfitting; {why}")]


def clipping(rows: Sequence[dict], grad_clip: float, warmup: int = 0) -> list[Finding]:
    """The gradient norm above ``grad_clip`` (> 0) on ≥ CLIP_FRACTION of the last CLIP_STEPS steps that have
    one, all of them after step CLIP_STEPS and after warm-up: a note (clipping set on purpose does that)."""
    if not grad_clip or grad_clip <= 0:
        return []
    pairs = [(row_step(r), g) for r in rows if (g := row_number(r, GRAD_NORM)) is not None]
    last = pairs[-CLIP_STEPS:]
    if len(last) < CLIP_STEPS or last[0][0] <= max(CLIP_STEPS, warmup):
        return []
    clipped = sum(g > grad_clip for _, g in last)
    if clipped >= CLIP_FRACTION * len(last):
        return [Finding("clipping", last[-1][0],
                        f"the gradient norm was above grad_clip = {grad_clip:g} on {clipped} of the last {len(last)} "
                        "steps: clipping sets the length of every step, which keeps training stable; lower the "
                        "learning rate only if the loss also spikes or stalls.",
                        warning=False)]
    return []


SPIKE_CONTEXT = 2 * SPIKE_WINDOW + 1  # rows before the new ones for `spikes` to judge these as over all of them
TAIL_ROWS = 2 * max(PLATEAU_STEPS, CLIP_STEPS)  # the rows the plateau and clipping rules look at (with room)
LATE_EVAL_ROWS = 2000  # an evaluation's numbers may join a row up to this many rows after it was first read
KEEP_ROWS = max(SPIKE_CONTEXT, TAIL_ROWS, LATE_EVAL_ROWS)  # the rows a `Diagnosis` keeps
LOSS_ENDS = 20  # steps whose median loss is where the run started, and where it is now (`Diagnosis.summary`)

HeadCheck = tuple[int, Sequence[Finding]]  # a probe step and its `head_findings`


class Diagnosis:
    """Every rule above over a run's metrics rows as they arrive: call it with the rows added since the last
    call (a reopened run's all at once); it returns what every rule finds over all the rows so far. It keeps
    only what the rules look back at (the last `KEEP_ROWS` rows, the evaluations, the spikes found), so a call
    costs the new rows and its memory stays bounded however long the run (the GUI holds no rows; a 17,000-step
    run took 0.3 s a call over all its rows when it did). An evaluation's numbers may join a row already given
    (the same dict, updated) up to `LATE_EVAL_ROWS` rows later. ``grad_clip`` and ``warmup`` are the run's
    train settings; ``unigram`` the corpus's unigram entropy in nats per token (None: no plateau rule);
    ``split`` meta.json's ``split_gap`` (None: not measured, no `split_mismatch` rule); ``expected`` what the
    run's preset expects (finding kind → why it is normal there: `as_expected`).

    ``heads``, when given, is the latest probe step's `head_findings`: listed with the rest unless the task is
    `solved` (then how the heads attend is no cause for concern)."""

    def __init__(self, grad_clip: float = 0.0, unigram: float | None = None, warmup: int = 0,
                 split: dict | None = None, expected: Mapping[str, str] | None = None):
        self.grad_clip, self.unigram, self.warmup, self.split = grad_clip, unigram, warmup, split
        self.expected: Mapping[str, str] = dict(expected or {})
        self._recent: list[dict] = []  # the last KEEP_ROWS rows given
        self._first: list[float] = []  # the first LOSS_ENDS finite train losses
        self._non_finite: list[Finding] = []
        self._spikes: list[Finding] = []
        self._came_back: dict[int, bool] = {}  # spike step → `recovered`, once it could tell
        self._evals: dict[int, dict] = {}  # step → evaluation row
        self._heads: HeadCheck | None = None

    def __call__(self, new: Sequence[dict], heads: HeadCheck | None = None) -> list[Finding]:
        if new:
            self._non_finite = self._non_finite or non_finite(new)
            first = row_step(new[0])
            judged = spikes([*self._recent[-SPIKE_CONTEXT:], *new])
            self._spikes = (self._spikes + [f for f in judged if f.step >= first])[-SPIKE_MAX_FINDINGS:]
            if len(self._first) < LOSS_ENDS:
                _, losses = _losses(new)
                self._first += losses[np.isfinite(losses)][:LOSS_ENDS - len(self._first)].tolist()
        if heads is not None:
            self._heads = heads
        window = [*self._recent[-LATE_EVAL_ROWS:], *new]
        for r in window:
            if is_evaluated(r):
                self._evals[row_step(r)] = r
        self._recent = window[-KEEP_ROWS:]
        tail = self._recent[-TAIL_ROWS:]
        found = [*split_mismatch(self.split), *self._non_finite, *self._spikes,
                 *overfitting([self._evals[s] for s in sorted(self._evals)]),
                 *unigram_plateau(tail, self.unigram, self.warmup), *clipping(tail, self.grad_clip, self.warmup)]
        if self._heads is not None and self.solved() is None:
            found += self._heads[1]
        found = [as_expected(f, self.expected[f.kind], self._recovered(f)) if f.kind in self.expected else f
                 for f in found]
        return sorted(found, key=lambda f: f.step)

    def _recovered(self, found: Finding) -> bool | None:
        """`recovered` for a spike, kept once told (its rows may leave the ones kept); None for other kinds."""
        if found.kind != "spike":
            return None
        if found.step not in self._came_back and (told := recovered(self._recent, found.step)) is not None:
            self._came_back[found.step] = told
        return self._came_back.get(found.step)

    def solved(self) -> dict | None:
        """The latest evaluation if it shows the task solved (validation accuracy ≥ SOLVED_ACCURACY, or
        validation loss ≤ SOLVED_NATS), else None."""
        if not self._evals:
            return None
        last = self._evals[max(self._evals)]
        acc, val = row_number(last, ACCURACY), row_number(last, VAL_LOSS)
        if (acc is not None and acc >= SOLVED_ACCURACY) or (val is not None and 0 <= val <= SOLVED_NATS):
            return last
        return None

    def summary(self, found: Sequence[Finding]) -> str:
        """With no warning among ``found`` (what the last call returned), one line of what was checked ("Nothing
        unusual at step N: loss finite and falling …", or "No warning at step N: loss finite but not falling
        …"); "" with a warning, or before any train loss."""
        steps, losses = _losses(self._recent[-LOSS_ENDS:])
        now = losses[np.isfinite(losses)]
        if any(f.warning for f in found) or not self._first or not now.size:
            return ""
        start, end = float(np.median(self._first)), float(np.median(now))
        falling = end < start
        checks = [f"loss finite {'and' if falling else 'but not'} falling ({start:.2f} → {end:.2f})"]
        if len(self._recent) > SPIKE_MIN_HISTORY:
            checks.append("loss spikes that came back, as this preset expects" if any(f.kind == "spike" for f in found)
                          else "no spikes")
        if len(self._evals) > OVERFIT_EVALS:  # enough for the rule to have fired
            checks.append(f"no overfitting over {len(self._evals)} evaluations")
        gap = SplitGap.from_dict(self.split)
        if gap is not None:
            checks.append(f"validation text like the training text (token frequencies {gap.tv:.2f} apart; two "
                          f"samples of one text of these sizes: about {gap.chance:.2f})")
        tail = self._recent[-PLATEAU_STEPS:]
        if self.unigram is not None and len(tail) == PLATEAU_STEPS and row_step(tail[0]) > self.warmup:
            checks.append(f"not stuck at the unigram entropy ({self.unigram:.2f} nats)")
        if self.grad_clip > 0 and not any(f.kind == "clipping" for f in found):
            norms = [g for r in self._recent[-CLIP_STEPS:] if (g := row_number(r, GRAD_NORM)) is not None]
            if norms:
                checks.append(f"gradient clipped on {sum(g > self.grad_clip for g in norms)} of the last "
                              f"{len(norms)} steps")
        solved = self.solved()
        if solved is not None:
            acc = row_number(solved, ACCURACY)
            checks.append("task solved (" + (f"accuracy {acc:.1%}" if acc is not None else
                                             f"validation loss {solved['val_loss']:.4f}") + "), so heads are not judged")
        elif self._heads is not None:
            step, heads = self._heads
            uniform_checked = step >= UNIFORM_AFTER and not any(f.kind == "uniform_head" for f in heads)
            checks.append(f"no dead {'or uniform ' if uniform_checked else ''}heads at step {step:,}")
        return f"{'Nothing unusual' if falling else 'No warning'} at step {int(steps[-1]):,}: " + ", ".join(checks) + "."


def diagnose(rows: Sequence[dict], grad_clip: float = 0.0, unigram: float | None = None,
             warmup: int = 0, split: dict | None = None, expected: Mapping[str, str] | None = None) -> list[Finding]:
    """Every rule above over ``rows`` (metrics rows, in step order), the findings sorted by step (see
    `Diagnosis` for the arguments, and for rows that keep growing)."""
    return Diagnosis(grad_clip, unigram, warmup, split, expected)(rows)


# ---- attention -----------------------------------------------------------------------------------------------
def _visible_keys(A: np.ndarray) -> np.ndarray:
    """(T_q,): how many keys each query may attend to in a map (H, T_q, T_k): i+1 for a causal map (square,
    nothing above the diagonal in any head), else T_k."""
    _, tq, tk = A.shape
    if tq == tk and not np.triu(A, 1).any():
        return np.arange(1, tq + 1)
    return np.full(tq, tk)


def _and(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def heads_text(heads: Sequence[tuple[MapName, int]], n_heads: dict[MapName, int]) -> str:
    """The heads ``(map name, h)`` (h from 0) grouped by layer and numbered from 1: "head 2 of layer 1",
    "heads 1 and 3 of layer 2 and all 4 heads of decoder layer 1"; ``n_heads`` is each map's head count."""
    by_map: dict[MapName, list[int]] = {}
    for name, h in heads:
        by_map.setdefault(name, []).append(h)
    parts = []
    for name in sorted(by_map, key=lambda n: n.order):
        hs = sorted(by_map[name])
        if len(hs) == 1:
            parts.append(f"head {hs[0] + 1} of {name.label}")
        elif len(hs) == n_heads.get(name):
            parts.append(f"all {len(hs)} heads of {name.label}")
        else:
            parts.append(f"heads {_and([str(h + 1) for h in hs])} of {name.label}")
    return _and(parts)


def dead_heads(maps: AttentionMaps, step: int = 0) -> list[Finding]:
    """Heads that do not look, at most one finding of each kind, every such head in its one line:
    "dead_head" (a warning) for a head whose every query (with ≥ 2 keys to choose from) puts almost all its
    weight on the same key, entropy below DEAD_ENTROPY_NATS (a position sink; a head as sharp on a different
    key per query, e.g. the previous token, looks); "uniform_head" (a note) for a head whose every query
    spreads it at least UNIFORM_FRACTION · log(its visible keys), an average over the input that picks
    nothing out."""
    dead: list[tuple[MapName, int]] = []
    uniform: list[tuple[MapName, int]] = []
    n_heads: dict[MapName, int] = {}
    for name in sorted(maps.maps, key=lambda n: n.order):
        A = np.asarray(maps.maps[name], dtype=np.float64)
        n_heads[name] = A.shape[0]
        visible = _visible_keys(A)
        choose = visible >= 2
        if not choose.any():
            continue
        H = -(A * np.log(np.where(A > 0, A, 1.0))).sum(-1)  # (heads, T_q): each query's entropy in nats
        top = A.argmax(-1)  # (heads, T_q): each query's key of most weight
        for h in range(A.shape[0]):
            row = H[h, choose]
            if (row < DEAD_ENTROPY_NATS).all() and (top[h, choose] == top[h, choose][0]).all():
                dead.append((name, h))
            elif (row >= UNIFORM_FRACTION * np.log(visible[choose])).all():
                uniform.append((name, h))
    found = []
    if dead:
        one = len(dead) == 1
        found.append(Finding("dead_head", step, f"{heads_text(dead, n_heads)} always {'attends' if one else 'attend'} "
                             f"to the same key (a position sink): {'it' if one else 'they'} may be dead; more "
                             "training or a lower learning rate may help.", heads=tuple(dead)))
    if uniform:
        one = len(uniform) == 1
        found.append(Finding("uniform_head", step, f"{heads_text(uniform, n_heads)} "
                             f"{'attends' if one else 'attend'} uniformly: each query averages every position it "
                             "sees (a summary of the input) and picks none out. Normal early in training and "
                             "common in a first layer; heads that stay so in every layer may be more than the "
                             "task needs.", warning=False, heads=tuple(uniform)))
    return found


def head_findings(maps: AttentionMaps, step: int) -> list[Finding]:
    """The `dead_heads` of a probe step worth listing: the dead ones, and the uniform ones from step
    UNIFORM_AFTER on."""
    return [f for f in dead_heads(maps, step) if f.kind != "uniform_head" or step >= UNIFORM_AFTER]


def latest_head_findings(run_dir: str | Path) -> HeadCheck | None:
    """The latest probe step saved in a run folder (`probes`) and its `head_findings`; None when there is
    none or it cannot be read."""
    saved = list_probes(run_dir)
    if not saved:
        return None
    step = max(saved)
    try:
        return step, head_findings(load_probe_file(saved[step]), step)
    except ValueError:
        return None


__all__ = ["Finding", "HeadCheck", "unigram_entropy", "non_finite", "spikes", "recovered", "as_expected", "overfitting",
           "unigram_plateau", "split_mismatch", "clipping", "Diagnosis", "diagnose", "heads_text", "dead_heads",
           "head_findings", "latest_head_findings"]
