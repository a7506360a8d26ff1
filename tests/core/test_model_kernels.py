"""What the model asks of the device, beyond the values the reference tests check: no float64 in a float32
model (Apple MPS has none), the arguments that let scaled_dot_product_attention pick its fast kernels, no
host syncs, and a KV cache that decodes a token without concatenating or recomputing tables."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fatstudio import ModelConfig, build_model
from fatstudio.core.config import POSITIONS
from fatstudio.core.model import KVCache
from fatstudio.core.model.positions import sinusoids

SMALL = dict(vocab_size=13, l_max=16, L=2, L_enc=2, L_dec=2, H=2, d_e=16, d_mlp=24)
SYNC = "_local_scalar_dense"  # what int(t), bool(t) and t.item() dispatch to: the host waits for the device


class Ops(TorchDispatchMode):
    """Records every aten op run inside it (backward included) with the dtypes of its tensors in and out."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, set]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        self.calls.append((func.overloadpacket.__name__, {t.dtype for t in tensors}))
        return out

    def names(self) -> set[str]:
        return {name for name, _ in self.calls}

    def with_dtype(self, dtype) -> set[str]:
        return {name for name, dtypes in self.calls if dtype in dtypes}


def model_of(arch, **kw):
    torch.manual_seed(0)
    return build_model(ModelConfig(arch=arch, **{**SMALL, **kw}))


def run_everything(model, arch):
    """Training forward + backward with padding, attention capture, and (decoders) cached decoding."""
    x = torch.randint(0, 13, (2, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2], dtype=torch.bool)
    kw = dict(context=torch.randint(0, 13, (2, 5)), context_mask=mask[:, :5]) if arch == "edt" else {}
    model.train()
    model(x, mask=mask, **kw).sum().backward()
    model(x, **kw).sum().backward()
    model.eval()
    with torch.no_grad():
        model(x, return_attention=True, **kw)
        if arch != "bert":
            cache = KVCache()
            Z = model.encode(kw["context"]) if arch == "edt" else None
            for chunk in (x[:, :3], x[:, 3:5], x[:, 5:6]):
                model.decode(chunk, Z, cache=cache) if arch == "edt" else model(chunk, cache=cache)


@pytest.mark.parametrize("arch", ["gpt", "gopher", "bert", "edt"])
@pytest.mark.parametrize("positions", POSITIONS)
def test_float32_model_never_computes_in_float64_nor_waits_for_the_device(arch, positions):
    """No float64 op (MPS has none); masks and relative distances come from Python ints, so no host sync."""
    model = model_of(arch, positions=positions, dropout=0.1)
    with Ops() as ops:
        run_everything(model, arch)
    assert not ops.with_dtype(torch.float64), f"float64 in {sorted(ops.with_dtype(torch.float64))}"
    assert SYNC not in ops.names()


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "alibi", "relative"])
def test_fixed_tables_follow_the_model_dtype_exactly(positions):
    model = model_of("gpt", positions=positions)
    tables = dict(model.named_buffers())
    assert tables and all(t.dtype == torch.float32 for t in tables.values())
    model.double()
    assert all(t.dtype == torch.float64 for t in model.buffers())
    if positions == "sinusoidal":  # the exact float64 values, not float32 ones upcast
        assert torch.equal(model.embed.W_p_table, sinusoids(torch.arange(1, 17), 16, 16.0))  # b = ℓ_max (Algorithm 2)
    model.float()
    assert all(torch.equal(t, dict(model.named_buffers())[n]) for n, t in tables.items())


class SDPA:
    """Stands in for F.scaled_dot_product_attention and records what each call was given."""

    def __init__(self, monkeypatch):
        self.calls = []
        self.real = F.scaled_dot_product_attention
        monkeypatch.setattr(F, "scaled_dot_product_attention", self)

    def __call__(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        self.calls.append(dict(q=q, k=k, v=v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=enable_gqa))
        return self.real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                         enable_gqa=enable_gqa)

    def took(self):
        calls, self.calls = self.calls, []
        return calls


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rope", "none"])
def test_causal_attention_without_padding_is_flash_eligible(monkeypatch, positions):
    sdpa = SDPA(monkeypatch)
    model = model_of("gpt", positions=positions).train()
    model(torch.randint(0, 13, (2, 6)))
    calls = sdpa.took()
    assert len(calls) == 2 and all(c["is_causal"] and c["attn_mask"] is None for c in calls)


def test_bidirectional_and_cross_attention_without_padding_get_no_mask(monkeypatch):
    sdpa = SDPA(monkeypatch)
    model_of("bert")(torch.randint(0, 13, (2, 6)))
    model_of("edt")(torch.randint(0, 13, (2, 6)), context=torch.randint(0, 13, (2, 4)))
    calls = sdpa.took()
    assert len(calls) == 2 + 2 + 2 * 2  # bert, edt encoder, edt decoder self and cross
    assert all(c["attn_mask"] is None for c in calls)
    assert [c["is_causal"] for c in calls] == [False] * 4 + [True, False] * 2


def test_masks_are_built_where_needed(monkeypatch):
    """Padding, an additive position bias, and a cached block of several queries (is_causal is top-left)."""
    sdpa = SDPA(monkeypatch)
    x = torch.randint(0, 13, (2, 6))
    model = model_of("gpt").eval()
    model(x, mask=torch.tensor([[1] * 6, [1] * 4 + [0] * 2], dtype=torch.bool))
    assert all(c["attn_mask"] is not None and not c["is_causal"] for c in sdpa.took())
    for positions in ("alibi", "relative"):
        model_of("gpt", positions=positions)(x)
        assert all(c["attn_mask"] is not None and not c["is_causal"] for c in sdpa.took())
    cache = KVCache()
    model(x[:, :3], cache=cache)  # past = 0: SDPA's own causal mask
    assert all(c["is_causal"] and c["attn_mask"] is None for c in sdpa.took())
    model(x[:, 3:5], cache=cache)  # queries 3, 4 of keys 0..4: the mask is not top-left, so it is built
    assert all(not c["is_causal"] and c["attn_mask"].shape[-2:] == (2, 5) for c in sdpa.took())
    model(x[:, 5:6], cache=cache)  # the last query sees every key
    assert all(not c["is_causal"] and c["attn_mask"] is None for c in sdpa.took())


def test_grouped_query_heads_are_expanded_only_for_a_mask(monkeypatch):
    """enable_gqa with a mask falls back to SDPA's slow math kernel, so masked attention repeats K and V."""
    sdpa = SDPA(monkeypatch)
    model = model_of("gpt", H=4, H_kv=2)
    x = torch.randint(0, 13, (2, 6))
    model(x)
    assert all(c["enable_gqa"] and c["k"].shape[1] == 2 and c["attn_mask"] is None for c in sdpa.took())
    model(x, mask=torch.tensor([[1] * 6, [1] * 4 + [0] * 2], dtype=torch.bool))
    assert all(not c["enable_gqa"] and c["k"].shape[1] == c["v"].shape[1] == 4 for c in sdpa.took())


def test_relative_positions_stay_in_the_autocast_dtype(monkeypatch):
    """u, v and the sinusoids in q's dtype: nothing of Transformer-XL's terms is upcast to float32 before the
    attention kernel (which on the CPU alone computes in fp32, see the next test)."""
    from fatstudio.core.model import attention

    seen = []
    real = attention._fused_attention
    monkeypatch.setattr(attention, "_fused_attention", lambda q, k, v, bias, *a: seen.append((q, k, v, bias))
                        or real(q, k, v, bias, *a))
    model = model_of("gopher").train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randint(0, 13, (2, 6)))
    assert seen and all({t.dtype for t in ts} == {torch.bfloat16} for ts in seen)


def test_cpu_attention_kernel_runs_in_fp32_under_bf16_autocast(monkeypatch):
    """The CPU's fused attention is several times slower in bf16 than in fp32 (forward and backward), so
    half-precision q, k, v reach it as fp32 and its output returns in q's dtype; the gradients flow."""
    sdpa = SDPA(monkeypatch)
    model = model_of("gpt").train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randint(0, 13, (2, 6)))
    calls = sdpa.took()
    assert calls and all(c[n].dtype == torch.float32 for c in calls for n in ("q", "k", "v"))
    logits.float().sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("positions", ["learned", "rope", "relative"])
def test_cached_decoding_writes_into_a_preallocated_cache(positions):
    model = model_of("gpt", positions=positions).eval()
    x = torch.randint(0, 13, (1, 6))
    cache = KVCache()
    with torch.no_grad():
        model(x[:, :4], cache=cache)
        slot = cache.layers["self/0"]
        k = slot.k
        assert k.shape == (1, 2, 16, 8)  # room for l_max positions
        with Ops() as ops:
            model(x[:, 4:5], cache=cache)
    assert slot.k is k and slot.n == cache.length == 5  # written in place, not concatenated
    assert not ops.names() & {"cos", "sin", SYNC}
    if positions == "learned":  # nothing is built for the mask of a last query
        assert "arange" not in ops.names()


def test_self_attention_projects_q_k_v_in_one_product():
    """[W_q; W_k; W_v] X is one matrix product; the parameters stay the paper's three matrices."""
    model = model_of("gpt", L=1, bias=True)
    assert {"layers.0.attn.W_q.weight", "layers.0.attn.W_k.bias", "layers.0.attn.W_v.weight"} <= set(model.state_dict())
    with Ops() as ops:
        model(torch.randint(0, 13, (2, 6)))
    products = [name for name, _ in ops.calls if name in ("mm", "addmm", "bmm")]
    assert len(products) == 1 + 1 + 2 + 1  # Q K V, W_o, the MLP's two, W_u
