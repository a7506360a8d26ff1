"""Hook points (core/model/hooks.py): every point of every architecture and variation is what its name says,
reads without changing anything, replaces what follows it (the identity bit for bit), costs the fused attention
kernel nothing while no one watches the pattern, acts only in the thread that attached it, and is always
removed."""
import copy
import pathlib
import threading

import pytest
import torch
import torch.nn.functional as F

from fatstudio import ModelConfig, build_model
from fatstudio.core.model import KVCache
from fatstudio.core.model.hooks import hook_point, hooked, point_names, recorded

VARIANTS = {
    "gpt": dict(arch="gpt"),
    "gopher": dict(arch="gopher"),  # RMSnorm, Transformer-XL relative positions
    "bert": dict(arch="bert", n_classes=3),  # post-LN, the final projection
    "edt": dict(arch="edt"),  # post-LN, encoder, decoder, cross-attention
    "gpt-post-gqa-rope": dict(arch="gpt", norm_position="post", H_kv=1, positions="rope", activation="swiglu"),
    "gpt-alibi-gqa": dict(arch="gpt", positions="alibi", H=4, H_kv=2),
    "bert-pre-embed_norm": dict(arch="bert", norm_position="pre", embed_norm=True, d_f=6),
    "edt-pre-rms": dict(arch="edt", norm_position="pre", norm="rms"),
}
N_V = 13


def tiny(name, dtype=torch.float64):
    kw = dict(VARIANTS[name])
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=N_V, l_max=16, L=2, L_enc=2, L_dec=2, H=kw.pop("H", 2), d_e=8, d_mlp=16, **kw)
    model = build_model(cfg).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.6 if p.dim() >= 2 else 0.3)  # every part matters
    return model


def inputs(model, B=2, T=6):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(N_V, (B, T), generator=g)
    return x, ({"context": torch.randint(N_V, (B, T + 2), generator=g)} if model.config.arch == "edt" else {})


def run(model, x, kw):
    with torch.no_grad():
        return model(x, **kw)


def read_all(model, x, kw):
    """(logits, every point's tensor) of one forward pass."""
    with recorded(model, point_names(model)) as seen:
        logits = run(model, x, kw)
    return logits, {name: got[0] for name, got in seen.items()}


# ------------------------------------------------------------------------------------------------ the names
def test_the_names_of_each_architecture():
    attn = ["in", "q", "k", "v", "scores", "mask", "pattern", "z", "out"]
    assert point_names(tiny("gpt"))[:17] == [
        "embed", "self/0/resid_pre", "self/0/norm-stats", *(f"self/0/{p}" for p in attn), "self/0/resid_mid",
        "mlp/0/norm-stats", "mlp/0/in", "mlp/0/out", "self/0/resid_post"]
    bert = point_names(tiny("bert"))  # post-LN: each sublayer's sum before its norm
    assert bert[11:19] == ["self/0/sum", "self/0/norm-stats", "self/0/resid_mid", "mlp/0/in", "mlp/0/out",
                           "mlp/0/sum", "mlp/0/norm-stats", "self/0/resid_post"]
    assert bert[-4:] == ["final", "proj", "proj-norm-stats", "proj-norm"]
    assert point_names(tiny("bert-pre-embed_norm"))[:3] == ["embed", "embed-norm-stats", "self/0/resid_pre"]
    assert point_names(tiny("edt-pre-rms"))[-2:] == ["dec-final-norm-stats", "dec-final"]
    edt = point_names(tiny("edt"))
    assert edt[0] == "enc-embed" and edt.index("enc-final") < edt.index("dec-embed") and edt[-1] == "dec-final"
    decoder = [n for n in edt if n.split("/")[0] in ("dec", "cross", "dec-mlp") and n.split("/")[1] == "0"]
    assert decoder == ["dec/0/resid_pre", *(f"dec/0/{p}" for p in attn), "dec/0/sum", "dec/0/norm-stats",
                       "dec/0/resid_mid", *(f"cross/0/{p}" for p in attn), "cross/0/sum", "cross/0/norm-stats",
                       "dec/0/resid_mid_cross", "dec-mlp/0/in", "dec-mlp/0/out", "dec-mlp/0/sum",
                       "dec-mlp/0/norm-stats", "dec/0/resid_post"]
    assert "self/0/sum" not in point_names(tiny("gpt"))  # pre-LN has no sum apart from the stream


@pytest.mark.parametrize("name", VARIANTS)
def test_points_are_listed_in_the_order_they_run(name):
    model = tiny(name)
    x, kw = inputs(model)
    order: list[str] = []
    with hooked(model, {p: (lambda t, p=p: order.append(p)) for p in point_names(model)}):
        run(model, x, kw)
    assert order == point_names(model)


def test_an_unknown_name_is_a_value_error_naming_valid_ones():
    model = tiny("gpt")
    with pytest.raises(ValueError, match=r"no hook point 'self/0/resid'.*'self/0/resid_pre'.*point_names"):
        hook_point(model, "self/0/resid")
    with pytest.raises(ValueError, match="embed, self/0/resid_pre"), \
            hooked(model, {"mlp/0/out": torch.zeros_like, "attn/0/z": torch.zeros_like}):
        pass
    assert not any(p.hooks for p in model.hook_points().values())  # checked before anything was attached


# ------------------------------------------------------------------------------------------------ reading
@pytest.mark.parametrize("name", VARIANTS)
def test_each_point_holds_what_its_name_says(name):
    """Each point's tensor, recomputed from the points before it with the model's own modules."""
    model = tiny(name)
    x, kw = inputs(model)
    logits, a = read_all(model, x, kw)
    with torch.no_grad():  # reading changes nothing (the patterns read: the explicit softmax, as these)
        assert torch.equal(logits, model(x, return_attention=True, **kw)[0])
    pre = model.config.norm_position == "pre"
    stacks = [("enc", "enc-", model.encoder, model.norm_enc), ("dec", "dec-", model.decoder, model.norm_dec)] \
        if name.startswith("edt") else [("self", "", model.layers, model.norm_final)]
    for kind, prefix, layers, final in stacks:
        X = a[f"{prefix}embed"]
        embed_norm = model.embed.norm
        assert torch.equal(a[f"{kind}/0/resid_pre"], embed_norm(X) if embed_norm is not None else X)
        for l, layer in enumerate(layers):
            subs = [(layer.attn, layer.norm_attn, "resid_mid"), (layer.cross, layer.norm_cross, "resid_mid_cross"),
                    (layer.mlp, layer.norm_mlp, "resid_post")]
            X = a[f"{kind}/{l}/resid_pre"]
            for sub, norm, after in subs:
                if sub is None:
                    continue
                p = sub.name
                assert torch.equal(a[f"{p}/in"], norm(X) if pre else X), p
                if p.split("/")[0] in (kind, "cross"):  # an attention: pattern, heads, W_o
                    A = a[f"{p}/pattern"]
                    assert A.shape == (X.shape[0], sub.H, X.shape[1], A.shape[-1])
                    torch.testing.assert_close(A.sum(-1), torch.ones_like(A[..., 0]))
                    z = a[f"{p}/z"]
                    assert z.shape == (X.shape[0], X.shape[1], sub.H, sub.d_mid)
                    assert torch.equal(a[f"{p}/out"], sub.W_o(z.reshape(*z.shape[:2], -1)))
                else:
                    assert torch.equal(a[f"{p}/out"], sub(a[f"{p}/in"]))
                if pre:
                    X = X + a[f"{p}/out"]
                else:
                    assert torch.equal(a[f"{p}/sum"], X + a[f"{p}/out"])
                    X = norm(a[f"{p}/sum"])
                assert torch.equal(a[f"{kind}/{l}/{after}"], X), (p, after)
        assert torch.equal(a[f"{prefix}final"], final(X))
    if model.config.arch == "bert":
        assert torch.equal(a["proj"], F.gelu(model.W_f(a["final"])))
        assert torch.equal(a["proj-norm"], model.norm_f(a["proj"]))
        assert torch.equal(logits, model.unembed(a["proj-norm"]))
    else:
        assert torch.equal(logits, model.unembed(a["dec-final" if name.startswith("edt") else "final"]))


@pytest.mark.parametrize("name", VARIANTS)
def test_the_points_inside_attention_and_norms_are_the_paper_s_quantities(name):
    """Q, K, V per head; softmax(scores + mask) is the pattern, the mask 0 or -∞ (causal: -∞ above the
    diagonal); a norm's statistics are the mean and √(v + ε) of what it norms, Algorithm 6 with them its output."""
    model = tiny(name)
    x, kw = inputs(model)
    _, a = read_all(model, x, kw)
    cfg = model.config.resolved()
    for p in (n.removesuffix("/pattern") for n in a if n.endswith("/pattern")):
        q, k, v, S, M = (a[f"{p}/{w}"] for w in ("q", "k", "v", "scores", "mask"))
        assert q.shape[1:] == (cfg.H, x.shape[1] if not p.startswith("enc") else q.shape[2], cfg.d_attn)
        assert k.shape[1] == v.shape[1] == cfg.H_kv and v.shape[-1] == cfg.d_mid
        torch.testing.assert_close((S + M).softmax(-1), a[f"{p}/pattern"], rtol=0, atol=1e-12)
        assert set(M.unique().tolist()) <= {0.0, float("-inf")} and M.shape[1] == 1
        causal = p.startswith(("self", "dec")) and cfg.arch in ("gpt", "gopher", "edt")
        assert torch.equal(torch.isinf(M[0, 0]), torch.ones_like(M[0, 0], dtype=torch.bool).triu(1) if causal
                           else torch.zeros_like(M[0, 0], dtype=torch.bool)), p
        if cfg.positions not in ("rope", "relative", "alibi"):
            W_q = model.get_submodule(_module(model, p)).W_q
            torch.testing.assert_close(q, W_q(a[f"{p}/in"]).view(*q.shape[:1], -1, cfg.H, cfg.d_attn).transpose(1, 2),
                                       rtol=0, atol=1e-12)
    for n in (n for n in a if n.endswith("norm-stats")):
        m, s = a[n][..., 0], a[n][..., 1]
        e = _normed_input(a, n)
        if e is None:
            continue
        mean = e.mean(-1) if cfg.norm == "layer" else torch.zeros_like(m)
        torch.testing.assert_close(m, mean, rtol=0, atol=1e-12)
        torch.testing.assert_close(s, ((e - mean[..., None]).square().mean(-1) + cfg.norm_eps).sqrt(), rtol=0, atol=1e-12)


def _module(model, point: str) -> str:
    """The attention module of a point's prefix ("self/1" -> "layers.1.attn")."""
    kind, l = point.split("/")
    stack = {"self": "layers", "enc": "encoder", "dec": "decoder", "cross": "decoder"}[kind]
    return f"{stack}.{l}.{'cross' if kind == 'cross' else 'attn'}"


def _normed_input(a, stats: str):
    """What the norm of ``stats`` reads, where a point holds it: post-LN a sublayer's sum, pre-LN the stream an
    attention reads, a stack's last layer (final norm), the embedding and bert's projection (None: elsewhere)."""
    sub = stats.removesuffix("/norm-stats")
    top = {"final-norm-stats": "self/1/resid_post", "enc-final-norm-stats": "enc/1/resid_post",
           "dec-final-norm-stats": "dec/1/resid_post", "embed-norm-stats": "embed", "proj-norm-stats": "proj"}
    return a.get(f"{sub}/sum", a.get(top.get(stats, f"{sub}/resid_pre")))


@pytest.mark.parametrize("name", VARIANTS)
def test_the_pattern_points_are_return_attention(name):
    model = tiny(name)
    x, kw = inputs(model)
    _, a = read_all(model, x, kw)
    with torch.no_grad():
        _, maps = model(x, return_attention=True, **kw)
    assert list(maps) == [n.removesuffix("/pattern") for n in point_names(model) if n.endswith("/pattern")]
    assert all(torch.equal(maps[k], a[f"{k}/pattern"]) for k in maps)
    if model.config.n_classes:
        with torch.no_grad():
            _, class_maps = model.classify(x, return_attention=True)
        assert class_maps.keys() == maps.keys() and all(torch.equal(class_maps[k], maps[k]) for k in maps)


def test_return_attention_keeps_autograd():
    model = tiny("gpt").train()
    x, _ = inputs(model)
    logits, maps = model(x, return_attention=True)
    maps["self/1"][:, :, -1, 0].sum().backward()
    assert model.layers[0].attn.W_q.weight.grad is not None and model.layers[0].attn.W_q.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["gpt", "gopher", "edt", "gpt-post-gqa-rope"])
def test_points_read_while_decoding_with_a_cache(name):
    """A cached step's points are the full pass's at its positions (its pattern: its queries' rows)."""
    model = tiny(name)
    x, kw = inputs(model)
    _, full = read_all(model, x, kw)
    edt = name.startswith("edt")
    kind, mlp = ("dec", "dec-mlp") if edt else ("self", "mlp")
    points = [f"{kind}/1/pattern", f"{mlp}/0/out", f"{kind}/1/resid_post"]
    cache, chunks = KVCache(), [(0, 3), (3, 5), (5, 6)]
    with torch.no_grad(), recorded(model, points) as seen:
        Z = model.encode(kw["context"]) if edt else None
        for s, e in chunks:
            model.decode(x[:, s:e], Z, cache=cache) if edt else model(x[:, s:e], cache=cache)
    for p in points:
        assert len(seen[p]) == len(chunks)
        for (s, e), got in zip(chunks, seen[p]):
            want = full[p][:, :, s:e, :e] if p.endswith("/pattern") else full[p][:, s:e]  # keys 0..e-1
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------ replacing
@pytest.mark.parametrize("name", VARIANTS)
def test_the_identity_changes_nothing_bit_for_bit(name):
    model = tiny(name)
    x, kw = inputs(model)
    plain = run(model, x, kw)
    others = [p for p in point_names(model) if not p.endswith("/pattern")]
    with hooked(model, dict.fromkeys(others, torch.clone)):  # a replacement, the same numbers
        assert torch.equal(run(model, x, kw), plain)
    patterns = [p for p in point_names(model) if p.endswith("/pattern")]
    with recorded(model, patterns):  # the explicit softmax: read ...
        watched = run(model, x, kw)
    with hooked(model, dict.fromkeys(point_names(model), torch.clone)):  # ... and replaced by itself
        assert torch.equal(run(model, x, kw), watched)
    torch.testing.assert_close(watched, plain, rtol=0, atol=1e-12)  # the fused kernel's numbers, to rounding


@pytest.mark.parametrize("name", VARIANTS)
def test_a_replaced_point_changes_what_follows_and_nothing_before(name):
    model = tiny(name)
    x, kw = inputs(model)
    plain, clean = read_all(model, x, kw)
    names = point_names(model)

    def uniform(A: torch.Tensor) -> torch.Tensor:  # another attention pattern: uniform over the keys allowed
        allowed = (A > 0).to(A.dtype)
        return allowed / allowed.sum(-1, keepdim=True)

    def moved(t: torch.Tensor) -> torch.Tensor:  # a fixed random step, which no norm undoes
        return t + torch.randn(t.shape, generator=torch.Generator().manual_seed(2), dtype=t.dtype)
    for i, p in enumerate(names):
        replace = uniform if p.endswith("/pattern") else moved
        later: list[torch.Tensor] = []
        with hooked(model, [(p, replace), (p, later.append)]), recorded(model, names) as seen:
            logits = run(model, x, kw)
        assert torch.equal(later[0], replace(clean[p])), p  # hooks on a point run in order: the next sees it
        assert all(torch.equal(seen[q][0], clean[q]) for q in names[:i]), p  # what ran before is untouched
        assert (logits - plain).abs().max() > 1e-6, p  # what follows used the replacement


def test_a_head_s_output_replaced_at_z_is_its_columns_of_W_o():
    """Zeroing head h at ``z`` is the model with head h's columns of W_o zeroed."""
    model = tiny("gpt-alibi-gqa")
    x, _ = inputs(model)
    attn = model.layers[1].attn

    def zero_head_2(z: torch.Tensor) -> torch.Tensor:
        z = z.clone()
        z[:, :, 2] = 0
        return z
    with hooked(model, {"self/1/z": zero_head_2}):
        ablated = run(model, x, {})
    with torch.no_grad():
        attn.W_o.weight[:, 2 * attn.d_mid:3 * attn.d_mid] = 0
    torch.testing.assert_close(ablated, run(model, x, {}), rtol=0, atol=1e-12)


def test_a_replacement_of_another_shape_is_refused():
    model = tiny("gpt")
    x, _ = inputs(model)
    with hooked(model, {"mlp/0/out": lambda t: t[:, :-1]}), pytest.raises(ValueError, match="'mlp/0/out'.*shape"):
        run(model, x, {})


# ------------------------------------------------------------------------------------------------ the kernel
@pytest.fixture
def sdpa_calls(monkeypatch):
    """How many times the fused attention kernel runs."""
    calls = []
    fused = F.scaled_dot_product_attention

    def counted(*args, **kw):
        calls.append(1)
        return fused(*args, **kw)
    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    return calls


@pytest.mark.parametrize("name", VARIANTS)
def test_the_fused_kernel_runs_unless_the_pattern_is_watched(name, sdpa_calls):
    model = tiny(name)
    x, kw = inputs(model)
    patterns = [p for p in point_names(model) if p.endswith("/pattern")]
    plain = run(model, x, kw)
    assert len(sdpa_calls) == len(patterns)  # nothing attached: the fused kernel for every attention
    sdpa_calls.clear()
    with hooked(model, {p: torch.clone for p in point_names(model) if p not in patterns}):
        assert torch.equal(run(model, x, kw), plain)
    assert len(sdpa_calls) == len(patterns)  # hooks elsewhere leave it fused
    sdpa_calls.clear()
    with recorded(model, patterns[-1:]):
        run(model, x, kw)
    assert len(sdpa_calls) == len(patterns) - 1  # only the watched attention is explicit
    sdpa_calls.clear()
    with torch.no_grad():
        model(x, return_attention=True, **kw)
    assert not sdpa_calls  # every map asked for: softmax(S/√d_attn) everywhere


def test_the_fused_kernel_runs_in_training(sdpa_calls):
    model = tiny("gopher").train()
    x, _ = inputs(model)
    model(x).sum().backward()
    assert len(sdpa_calls) == 2


# ------------------------------------------------------------------------------------------------ removal, threads
def test_hooks_are_removed_after_an_exception():
    model = tiny("edt")
    x, kw = inputs(model)
    plain = run(model, x, kw)

    def fails(t: torch.Tensor) -> None:
        raise RuntimeError("a hook failed")
    with pytest.raises(RuntimeError, match="a hook failed"), \
            hooked(model, {"enc-mlp/0/out": torch.zeros_like, "cross/1/pattern": fails}):
        run(model, x, kw)
    with pytest.raises(KeyError), recorded(model, ["dec/0/resid_pre"]):
        raise KeyError("the body failed")
    assert not any(p.hooks for p in model.hook_points().values())
    assert torch.equal(run(model, x, kw), plain)


def test_a_hook_acts_only_in_the_thread_that_attached_it():
    model = tiny("gpt")
    x, _ = inputs(model)
    plain = run(model, x, {})
    elsewhere: dict[str, torch.Tensor] = {}
    attached, ran = threading.Event(), threading.Event()

    def other_thread() -> None:
        attached.wait(timeout=60)
        elsewhere["logits"] = run(model, x, {})
        ran.set()
    t = threading.Thread(target=other_thread)
    t.start()
    with hooked(model, {"mlp/1/out": torch.zeros_like, "self/0/pattern": torch.clone}):
        attached.set()
        assert ran.wait(timeout=60)
        here = run(model, x, {})
    t.join()
    assert torch.equal(elsewhere["logits"], plain)  # the other thread: no hook, and the fused kernel
    assert (here - plain).abs().max() > 1e-3


def test_a_copy_of_a_model_made_while_hooked_carries_no_hook():
    model = tiny("bert")
    x, _ = inputs(model)
    with hooked(model, {"mlp/0/out": torch.zeros_like}):
        twin = copy.deepcopy(model)
        hooked_logits = run(model, x, {})
    assert not any(p.hooks for p in twin.hook_points().values())
    assert torch.equal(run(twin, x, {}), run(model, x, {})) and not torch.equal(hooked_logits, run(twin, x, {}))
    assert point_names(twin) == point_names(model) and twin.layers[0].mlp.hook_out is not model.layers[0].mlp.hook_out


def test_hooks_are_attached_in_one_module_only():
    """No other module of the package registers a torch hook or sets a point's hooks."""
    root = pathlib.Path(__file__).resolve().parents[2] / "fatstudio"
    for path in root.rglob("*.py"):
        if path.name == "hooks.py" and path.parent.name == "model":
            continue
        text = path.read_text(encoding="utf-8")
        assert "register_forward" not in text and "register_full_backward" not in text, path
        assert ".hooks = " not in text, path
