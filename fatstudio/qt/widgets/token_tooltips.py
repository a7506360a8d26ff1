"""Rich-text tooltips of the Prompt panel's tokens: a sampled token with its alternatives and cut-offs, a scored
token with its loss, the candidates at a mask."""
from __future__ import annotations

import html
import math

from ...core.config import Task
from ...core.inference.generation import TokenChoice
from ...core.inference.prompting import display_token
from ...core.inference.scoring import ScoredToken


def token_lines(text: str, prob: float, alternatives, heading: str, cut=lambda p: False) -> list[str]:
    """A token's tooltip head: the token and its p, then the top alternatives (the token itself marked ◀, those
    ``cut`` greyed)."""
    def row(tok: str, p: float, chosen: bool) -> str:
        is_cut = cut(p)
        style = ' style="color:#888"' if is_cut and not chosen else ""
        mark = " ◀" if chosen else (" (cut)" if is_cut else "")
        return (f"<tr{style}><td><code>{html.escape(display_token(tok, 20))}</code></td>"
                f"<td align='right'>&nbsp;{p:.3f}</td><td>{mark}</td></tr>")

    chosen_text = display_token(text if text else "", 20)
    lines = [f"<b><code>{html.escape(chosen_text)}</code></b> &nbsp; p = {prob:.4f}"]
    rows = []
    seen_chosen = False
    for tok, p in alternatives:
        is_chosen = not seen_chosen and abs(p - prob) < 1e-12 and display_token(tok, 20) == chosen_text
        seen_chosen |= is_chosen
        rows.append(row(tok, p, is_chosen))
    if rows:
        lines.append(f"{heading}<table>" + "".join(rows) + "</table>")
    return lines


def character_note(text: str, labels: list[str], probs: list[float]) -> str:
    """A tooltip line for ``text`` that several tokens make (``labels``, with their ``probs``): byte-level pieces
    that split a character's bytes between them."""
    parts = " + ".join(f"<code>{html.escape(display_token(t, 20))}</code> (p = {p:.3f})" for t, p in zip(labels, probs))
    return (f"{len(labels)} tokens make <code>{html.escape(display_token(text, 20))}</code> (a character's bytes split "
            f"between them): {parts}")


def choice_tooltip(ch: TokenChoice, temperature: float, top_k: int, top_p: float) -> str:
    """Rich-text tooltip of a sampled token: its probability, the top alternatives, the cut-offs."""
    lines = token_lines(ch.text, ch.prob, ch.alternatives, "Top alternatives (model p at τ = 1):",
                         lambda p: ((ch.top_k_cutoff is not None and p < ch.top_k_cutoff)
                                    or (ch.top_p_cutoff is not None and p < ch.top_p_cutoff)))
    if temperature == 0:
        lines.append("τ = 0: greedy, the most likely token is taken.")
    else:
        lines.append(f"τ = {temperature:g}: drawn from p<sup>1/τ</sup>.")
    if ch.top_k_cutoff is not None:
        lines.append(f"top-k = {top_k}: tokens with p &lt; {ch.top_k_cutoff:.4f} were cut.")
    if ch.top_p_cutoff is not None:
        lines.append(f"top-p = {top_p:g}: the nucleus kept tokens with p ≥ {ch.top_p_cutoff:.4f}.")
    return "<br>".join(lines)


_GIVEN = {  # what a scored token was predicted from, by task; {c} token{s}: how many tokens the model read
    "next_token": "given the {c} token{s} before it",
    "masked_lm": "with it masked, reading the other {c} token{s}",
    "seq2seq": "given the source and the {c} target token{s} before it",
}


def score_tooltip(tok: ScoredToken, task: Task) -> str:
    """Rich-text tooltip of a scored token: p, its loss, what it was predicted from and the most likely tokens
    at its place (the layout of `choice_tooltip`)."""
    if tok.loss is None:
        return (f"<b><code>{html.escape(display_token(tok.text, 20))}</code></b>: not scored. It has no prefix: "
                "next-token training reads windows of the corpus without bos, so no token predicts a text's first.")
    lines = token_lines(tok.text, tok.prob or 0.0, tok.alternatives, "Most likely here:")
    c = tok.context - (task == "seq2seq")
    given = _GIVEN[task].format(c=c, s="" if c == 1 else "s")
    lines.insert(1, f"loss −ln p = {tok.loss:.3f} nats ({tok.loss / math.log(2):.2f} bits), {given}")
    return "<br>".join(lines)


def candidates_tooltip(cands: list[tuple[str, float]]) -> str:
    rows = "".join(f"<tr><td><code>{html.escape(display_token(t, 20))}</code></td>"
                   f"<td align='right'>&nbsp;{p:.3f}</td></tr>" for t, p in cands)
    return f"Top predictions at this mask:<table>{rows}</table>"
