"""Attribution graphs for a prompt, by circuit-tracer's method (Ameisen et al. 2025, "Circuit tracing"; Hanna,
Piotrowski et al., circuit-tracer), on the `replacement` model: attention patterns and norm scales frozen at their
values on the prompt, each MLP replaced by its transcoder plus an error node.

Nodes: the token embedding e_t of each position (embedding plus position), each active feature (layer l,
position t, feature i) with its activation f, each error node ε_{l,t} and the target: the logit of one token at
one position. The replacement model is affine in the embeddings, activations and errors, so each target node (a
feature's pre-activation W_enc,i (x − μ) + b_enc,i, or the logit) is

    target = Σ_s A[target, s] + baseline,   A[target, s] = (∂ target / ∂ s) · s,

the sum over the source nodes s: the edge A[target, s] is s's direct effect, along the residual stream and
through the frozen attention, not through other nodes (a feature's activation is held at its value, the MLPs are
gone). ``baseline`` is the target with every source zero: what the biases alone give (b_o, b_v, β, each
transcoder's b_dec, b_enc and μ, passed through the frozen attention and norms). So the edges into the logit sum
to its change, ``logit − baseline``, exactly up to float rounding. The gradients of all targets come from one
backward pass written out by hand (the transposes of the frozen norms and attention, `Replacement.stream_grad`,
`Replacement.attention_grad`), with a row per target; ``baseline`` from a forward pass of the replacement model
with its sources zero, so the sum checks the one against the other.

Pruning (`prune`) as circuit-tracer prunes: Â = |A| with each target's row normalised to sum 1; a node's
influence on the logit is the logit's row of Â + Â² + … (every path, each step weighted by its share). The nodes
with the largest influence that together hold ``node_threshold`` (0.8) of it are kept (every embedding and the
logit always), then the edges with the largest score (Â's entry times the influence of its target, recomputed on
the kept nodes, the logit counting 1) that together hold ``edge_threshold`` (0.98); a feature or error left
without an edge out (or a feature without an edge in) goes, until none does.

Features are 0-based here (``Node.feature``); labels (`Node.label`) count them from 1, as the app does.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from ...data.tokenization import TokenizerLike
from ...inference.prompting import token_labels
from .dictionary import INFO, Dictionary, dictionary_folder, load
from .replacement import Replacement, transcoders_by_layer

NodeKind = Literal["embedding", "feature", "error", "logit"]
NODE_THRESHOLD, EDGE_THRESHOLD = 0.8, 0.98


@dataclass(frozen=True)
class Node:
    """One node: ``layer`` the MLP layer of a feature or error node (−1 an embedding, L the logit), ``position``
    0-based, ``feature`` 0-based (−1 unless a feature), ``activation`` a feature's activation, an error's or an
    embedding's norm, the logit's value; ``token`` the token at the position (the logit: the target token)."""

    kind: NodeKind
    layer: int
    position: int
    feature: int = -1
    activation: float = 0.0
    token: str = ""

    def label(self) -> str:
        """A short name: "emb 'a'@3", "L1 #13@5", "err L1@5", "logit 'e'@31" (positions and features from 1)."""
        at = f"@{self.position + 1}"
        if self.kind == "embedding":
            return f"emb {self.token!r}{at}"
        if self.kind == "feature":
            return f"L{self.layer} #{self.feature + 1}{at}"
        if self.kind == "error":
            return f"err L{self.layer}{at}"
        return f"logit {self.token!r}{at}"

    def describe(self) -> str:
        """One line for a tooltip: what the node is and its activation."""
        where = f"position {self.position + 1} ({self.token!r})"
        if self.kind == "embedding":
            return f"token embedding at {where}: ‖e‖ = {self.activation:.3g}"
        if self.kind == "feature":
            return f"feature {self.feature + 1} of mlp/{self.layer} at {where}: activation {self.activation:.3g}"
        if self.kind == "error":
            return f"error of mlp/{self.layer}'s transcoder at {where}: ‖ε‖ = {self.activation:.3g}"
        return f"logit of {self.token!r} at position {self.position + 1}: {self.activation:.4g}"


@dataclass
class AttributionGraph:
    """The nodes, in the order embeddings, features (layer by layer), errors (layer by layer), the logit (last);
    ``adjacency`` (n, n) with ``[t, s]`` the direct effect of node s on node t (see the module); ``influence``
    (n,) each node's influence on the logit (the logit's own: 1). ``logit`` and ``baseline`` the target logit and
    its value with every source zero; ``probability`` the target's probability. ``thresholds``: the pruning's
    (node, edge), None for a graph not pruned."""

    tokens: list[str]
    nodes: list[Node]
    adjacency: torch.Tensor
    influence: torch.Tensor
    target: int
    logit: float
    baseline: float
    probability: float
    thresholds: tuple[float, float] | None = None
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def target_index(self) -> int:
        return len(self.nodes) - 1

    @property
    def change(self) -> float:
        """logit − baseline: what the edges into the logit sum to (unpruned)."""
        return self.logit - self.baseline

    def edges(self) -> list[tuple[int, int, float]]:
        """(source, target, weight) of every non-zero edge."""
        t, s = self.adjacency.nonzero(as_tuple=True)
        return list(zip(s.tolist(), t.tolist(), self.adjacency[t, s].tolist()))

    def strongest(self, n: int = 5) -> list[int]:
        """The ``n`` feature nodes with the largest direct effect |A[logit, s]| on the logit, largest first."""
        row = self.adjacency[self.target_index].abs()
        features = [i for i, node in enumerate(self.nodes) if node.kind == "feature"]
        return sorted(features, key=lambda i: -float(row[i]))[:n]


def attribution_graph(model, transcoders: Iterable[Dictionary], ids: Sequence[int], *, target: int | None = None,
                      tokenizer: TokenizerLike | None = None) -> AttributionGraph:
    """The full (unpruned) graph of the logit of token ``target`` (default: the most likely) after the prompt
    ``ids``, read at its last position, for a gpt or gopher ``model`` with a transcoder for every MLP layer
    (see the module). ``tokenizer`` labels the tokens (without one: the ids as numbers)."""
    rep = Replacement(model, transcoders_by_layer(model, transcoders), ids)
    L, pos = rep.L, len(ids) - 1
    logits = rep.logits[pos]
    if target is None:
        target = int(logits.argmax())
    if not 0 <= target < logits.shape[0]:
        raise ValueError(f"the target token {target} is not in the vocabulary (0 … {logits.shape[0] - 1}).")
    label = (lambda ids: [str(i) for i in ids]) if tokenizer is None else (lambda ids: token_labels(tokenizer, ids))
    tokens = label(ids)
    emb, actives, values, errors = rep.sources(1)
    nodes = [Node("embedding", -1, t, -1, x, tokens[t]) for t, x in enumerate(emb[0].norm(dim=-1).tolist())]
    for l, (a, v) in enumerate(zip(actives, values)):
        nodes += [Node("feature", l, p, i, x, tokens[p])
                  for p, i, x in zip(a.position.tolist(), a.index.tolist(), v[0].tolist())]
    for l, e in enumerate(errors):
        nodes += [Node("error", l, t, -1, x, tokens[t]) for t, x in enumerate(e[0].norm(dim=-1).tolist())]
    nodes.append(Node("logit", L, pos, -1, float(logits[target]), label([target])[0]))
    A = _edges(rep, nodes, pos, target)
    with torch.no_grad():
        zero = rep.sources(1)
        base, _ = rep.run(torch.zeros_like(zero[0]), zero[1], [torch.zeros_like(v) for v in zero[2]],
                          [torch.zeros_like(e) for e in zero[3]])
    return AttributionGraph(tokens, nodes, A, influence(A, len(nodes) - 1), target, float(logits[target]),
                            float(base[0, pos, target]), float(logits.double().softmax(-1)[target]))


@torch.no_grad()
def _edges(rep: Replacement, nodes: list[Node], pos: int, target: int) -> torch.Tensor:
    """The adjacency matrix: one backward pass of every target at once, by hand through the replacement model
    (`Replacement.stream_grad`, `Replacement.attention_grad`). G holds, for each target so far (a row), the
    gradient of the target by the residual stream; it goes down the layers, and at layer l it meets the sources
    that MLP l writes (its features and error node; their edges are read off G) and gains the rows of layer l's
    features, which read the stream there."""
    T, L, n = len(rep.embedding), rep.L, len(nodes)
    first = {(node.kind, node.layer): i for i, node in reversed(list(enumerate(nodes)))}  # each block's first column
    M = rep.embedding.new_zeros(n, n)  # the rows of A in G's order
    G = rep.embedding.new_zeros(1, T, rep.embedding.shape[-1])
    G[0, pos] = rep.model.unembed.W_u.weight[target]
    G = rep.stream_grad("final", G)  # by the last layer's output
    rows = [n - 1]
    for l in reversed(range(L)):
        t, f, err, R = rep.transcoders[l], rep.f[l], rep.error[l], len(rows)
        c = first.get(("feature", l), 0)
        for p in range(T):  # feature i at p: f[p, i] · G[:, p] · W_dec[:, i]; layer l's features in (p, i) order
            idx = f[p].nonzero()[:, 0]
            M[:R, c:c + len(idx)] = (G[:, p] @ t.W_dec[:, idx]) * f[p, idx]
            c += len(idx)
        c = first[("error", l)]
        M[:R, c:c + T] = (G * err).sum(-1)  # G[:, p] · ε[p]
        on = f.nonzero()
        new = G.new_zeros(len(on), T, G.shape[-1])
        new[torch.arange(len(on), device=G.device), on[:, 0]] = t.W_enc[on[:, 1]]
        G = torch.cat([G, rep.stream_grad(f"mlp/{l}/in", new)])  # by the stream MLP l reads: layer l's features too
        rows += range(first.get(("feature", l), 0), first.get(("feature", l), 0) + len(on))
        G = G + rep.stream_grad(f"self/{l}/in", rep.attention_grad(l, G))  # by the stream attention l reads
    M[:len(rows), :T] = (G * rep.embedding).sum(-1)
    A = torch.zeros(n, n, dtype=torch.float64)
    A[rows] = M[:len(rows)].double().cpu()
    return A


def saved_transcoders(run_dir: str | Path, step: int, L: int) -> list[Dictionary]:
    """The transcoders a run keeps for every MLP layer at ``step`` (`dictionary.dictionary_folder` of
    ``mlp/0`` … ``mlp/L−1``), in layer order; a ValueError naming the layers without one."""
    folders = [dictionary_folder(run_dir, f"mlp/{l}", step) for l in range(L)]
    missing = [f"mlp/{l}" for l, f in enumerate(folders) if not (f / INFO).is_file()]
    if missing:
        raise ValueError(f"this run has no transcoder of {', '.join(missing)} at step {step:,}: train one for every "
                         "MLP layer first.")
    return [load(f) for f in folders]


def graph_for_text(loaded, transcoders: Iterable[Dictionary], text: str, target: str | None = None) -> AttributionGraph:
    """`attribution_graph` of the token that follows ``text`` (a LoadedModel's prompt): ``target`` a token's
    text (one token), or None for the model's most likely next token."""
    tok = loaded.tokenizer
    ids = tok.encode(text)
    if not ids:
        raise ValueError("write a prompt: the graph traces the token that follows it.")
    chosen = None
    if target:
        t = tok.encode(target)
        if len(t) != 1:
            raise ValueError(f"the target {target!r} is {len(t)} tokens; give one token.")
        chosen = t[0]
    return attribution_graph(loaded.model, transcoders, ids, target=chosen, tokenizer=tok)


# ------------------------------------------------------------------------------------------------ influence
def normalized(A: torch.Tensor) -> torch.Tensor:
    """|A| with each row (a target's incoming edges) summing to 1 (rows of zeros stay zero)."""
    M = A.abs()
    return M / M.sum(1, keepdim=True).clamp_min(1e-30)


def influence(A: torch.Tensor, target: int) -> torch.Tensor:
    """Each node's influence on node ``target``: its row of Â + Â² + … (Â `normalized`; the graph has no
    cycles, so the sum ends), the target's own set to 1."""
    M = normalized(A)
    v = torch.zeros(A.shape[0], dtype=A.dtype)
    v[target] = 1
    total = v.clone()
    for _ in range(A.shape[0]):
        v = v @ M
        if not v.any():
            break
        total += v
    return total


def threshold(scores: torch.Tensor, fraction: float) -> float:
    """The smallest score among the largest (positive) ones that together hold ``fraction`` of their sum (inf if
    none is positive)."""
    s = scores[scores > 0].sort(descending=True).values
    total = float(s.sum())
    if total <= 0:
        return float("inf")
    reach = (s.cumsum(0) / total >= fraction - 1e-12).nonzero()
    return float(s[int(reach[0]) if len(reach) else -1])


def prune(graph: AttributionGraph, node_threshold: float = NODE_THRESHOLD,
          edge_threshold: float = EDGE_THRESHOLD) -> AttributionGraph:
    """The graph cut to its most influential nodes and edges (see the module); ``stats`` says what it kept:
    ``node_influence`` and ``edge_score``, the fractions of the full graph's influence and edge score held by the
    nodes and edges selected by the thresholds (before the nodes left without edges go)."""
    for name, v in (("node", node_threshold), ("edge", edge_threshold)):
        if not 0 < v <= 1:
            raise ValueError(f"the {name} threshold must be in (0, 1]; it is {v}.")
    A, logit = graph.adjacency, graph.target_index
    kinds = [node.kind for node in graph.nodes]
    infl = graph.influence.clone()
    infl[logit] = 0
    keep = infl >= threshold(infl, node_threshold)
    keep &= infl > 0
    node_share = float(infl[keep].sum() / infl.sum().clamp_min(1e-30))
    always = torch.tensor([k in ("embedding", "logit") for k in kinds])
    keep |= always
    kept = A * keep[:, None] * keep[None, :]
    weight = influence(kept, logit)
    scores = normalized(kept) * weight[:, None]
    edges = (scores >= threshold(scores, edge_threshold)) & (scores > 0)
    edge_share = float(scores[edges].sum() / scores.sum().clamp_min(1e-30))
    feature = torch.tensor([k == "feature" for k in kinds])
    inner = torch.tensor([k in ("feature", "error") for k in kinds])
    while True:
        edges &= keep[:, None] & keep[None, :]
        drop = (inner & ~edges.any(0)) | (feature & ~edges.any(1))
        if not (drop & keep).any():
            break
        keep &= ~drop
    at = keep.nonzero()[:, 0]
    pruned = (A * edges)[at][:, at]
    return AttributionGraph(graph.tokens, [graph.nodes[int(i)] for i in at], pruned, graph.influence[at],
                            graph.target, graph.logit, graph.baseline, graph.probability,
                            (node_threshold, edge_threshold), {"node_influence": node_share, "edge_score": edge_share})


__all__ = ["AttributionGraph", "Node", "NodeKind", "NODE_THRESHOLD", "EDGE_THRESHOLD", "attribution_graph",
           "graph_for_text", "influence", "normalized", "prune", "saved_transcoders", "threshold"]
