# SPDX-License-Identifier: Apache-2.0
"""torch integration on the CPU: the pasa::attention custom ops, torch.compile, pasa.sdpa against
torch's scaled_dot_product_attention. Skipped where torch is not installed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: torch integration untested")
F = torch.nn.functional

import pasa  # noqa: E402


@pytest.fixture
def gen(rng):
    return torch.Generator().manual_seed(int(rng.integers(2**62)))


def randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


@pytest.mark.parametrize("h_q,h_kv,s_q,s_kv", [(4, 4, 17, 17), (8, 2, 9, 30), (4, 1, 30, 9)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_matches_torch(gen, h_q, h_kv, s_q, s_kv, is_causal):
    q = randn(gen, 2, h_q, s_q, 64)
    k, v = randn(gen, 2, h_kv, s_kv, 64), randn(gen, 2, h_kv, s_kv, 64)
    gqa = h_q != h_kv
    got = pasa.sdpa(q, k, v, is_causal=is_causal, enable_gqa=gqa)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=is_causal,
                                          enable_gqa=gqa)
    assert got.dtype == torch.float32 and got.shape == q.shape
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=0)


@pytest.mark.parametrize("kind", ["bool", "float", "padding"])
def test_sdpa_masks_match_torch(gen, kind):
    q, k, v = randn(gen, 2, 4, 13, 32), randn(gen, 2, 2, 13, 32), randn(gen, 2, 2, 13, 32)
    if kind == "bool":
        mask = torch.rand(2, 4, 13, 13, generator=gen) > 0.3
        mask[..., 0] = True  # torch gives NaN for rows with no key, pasa zeros
    elif kind == "float":
        mask = torch.randn(1, 4, 13, 13, generator=gen)
    else:
        mask = torch.ones(2, 1, 1, 13, dtype=torch.bool)
        mask[1, ..., :5] = False
    got = pasa.sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                          attn_mask=mask if kind != "float" else mask.double(),
                                          enable_gqa=True)
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=0)


def test_float64_masks_past_float32_saturate(gen):
    # A float64 mask is taken in float32: a finite value below its range hides a key as in fp64 (and a
    # row of such keys averages them), one above it is large, not inf; -inf still hides.
    q, k, v = randn(gen, 1, 2, 3, 16), randn(gen, 1, 2, 5, 16), randn(gen, 1, 2, 5, 16)
    mask = torch.zeros(3, 5, dtype=torch.float64)
    mask[0, 1:] = -1e300  # row 0 sees key 0 only
    mask[1, :] = -1e300  # row 1: every key alike
    mask[2, 0], mask[2, 1:] = 1e300, float("-inf")  # row 2: key 0 only
    for mask_arg, qkv in ((mask, (q, k, v)), (mask.numpy(), tuple(t.numpy() for t in (q, k, v)))):
        got = torch.as_tensor(pasa.attention(*qkv, attn_mask=mask_arg))  # (pasa.sdpa refuses it, as torch does)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got[0, :, 0].double(), v[0, :, 0].double(), atol=1e-6, rtol=0)
        torch.testing.assert_close(got[0, :, 1].double(), v[0].double().mean(dim=1), atol=1e-5, rtol=0)
        torch.testing.assert_close(got[0, :, 2].double(), v[0, :, 0].double(), atol=1e-6, rtol=0)


def test_sdpa_refuses_the_dtypes_torch_refuses(gen):
    q, k, v = randn(gen, 1, 2, 3, 16), randn(gen, 1, 2, 5, 16), randn(gen, 1, 2, 5, 16)
    with pytest.raises(pasa.PasaError, match=r"^key/value: dtypes bfloat16/float32 differ from query's float32"):
        pasa.sdpa(q, k.bfloat16(), v)
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: dtype float64 is neither bool, float32 nor"):
        pasa.sdpa(q, k, v, attn_mask=torch.zeros(3, 5, dtype=torch.float64))


def test_sdpa_errors_name_its_own_arguments(gen):
    q, k, v = randn(gen, 1, 2, 3, 16), randn(gen, 1, 2, 5, 16), randn(gen, 1, 2, 5, 16)
    with pytest.raises(pasa.PasaError, match=r"^query: unsupported dtype float64"):
        pasa.sdpa(q.double(), k.double(), v.double())
    v[0, 0, 0, 0] = float("nan")
    with pytest.raises(pasa.PasaError, match=r"^value: non-finite value"):
        pasa.sdpa(q, k, v)


def test_running_out_of_host_memory_is_a_pasa_error():
    # An output of 256 GiB: torch's allocator refuses it (named), or, where the OS overcommits, the
    # library's own check refuses the call before any work.
    q = torch.zeros(1, 1, 1, 64).expand(2**16, 2**14, 1, 64)
    with pytest.raises(pasa.PasaError, match=r"^out: cannot allocate an array of shape .*: out of memory"
                                             r"|needs .* of memory, only .* is available"):
        pasa.attention(q, q, q)


def test_sdpa_names_a_nested_tensor():
    nt = torch.nested.nested_tensor([torch.randn(1, 3, 4), torch.randn(1, 5, 4)])
    with pytest.raises(pasa.PasaError, match=r"^query: a nested tensor"):
        pasa.sdpa(nt, nt, nt)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes(gen, dtype):
    q, k, v = (randn(gen, 1, 4, 33, 64, dtype=dtype) for _ in range(3))
    out, lse = pasa.attention(q, k, v, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (1, 4, 33)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(out.double(), want, atol=eps, rtol=0)


def test_bshd_layout_and_out(gen):
    q, k, v = (randn(gen, 2, 19, 4, 64) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    result = pasa.attention(q, k, v, layout="bshd", out=out, causal=True)
    assert result is out
    want = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True)
    torch.testing.assert_close(out, want.transpose(1, 2), atol=2e-5, rtol=0)


def test_out_with_lse(gen):
    q, k, v = (randn(gen, 1, 2, 9, 64) for _ in range(3))
    out = torch.empty_like(q)
    o, lse = pasa.attention(q, k, v, out=out, return_lse=True)
    assert o is out and lse.shape == (1, 2, 9)
    ref_o, ref_lse = pasa.reference(q, k, v, return_lse=True)
    np.testing.assert_allclose(lse.numpy(), ref_lse, atol=2e-5)
    np.testing.assert_allclose(o.numpy(), ref_o, atol=2e-5)


def test_a_torch_out_needs_torch_inputs(gen):
    # NumPy q, k, v with a torch out= wrote it through DLPack, unseen by torch: its version counter
    # stayed, so a graph that had saved it computed its gradient from the new values, silently.
    q = randn(gen, 1, 2, 9, 64)
    out = torch.zeros_like(q)
    with pytest.raises(pasa.PasaError, match=r"^out: a torch.Tensor, but q is a numpy.ndarray"):
        pasa.attention(q.numpy(), q.numpy(), q.numpy(), out=out)
    assert (out == 0).all()


def test_reference_accepts_tensors(gen):
    q, k, v = (randn(gen, 1, 2, 9, 64) for _ in range(3))
    ref = pasa.reference(q, k, v)
    assert isinstance(ref, np.ndarray) and ref.dtype == np.float64


def test_requires_grad_inputs_run(gen):
    q = randn(gen, 1, 2, 9, 64).requires_grad_()
    k, v = randn(gen, 1, 2, 9, 64), randn(gen, 1, 2, 9, 64)
    with torch.no_grad():
        out = pasa.sdpa(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q.detach(), k, v), atol=2e-5,
                               rtol=0)


def test_errors_name_the_argument(gen):
    q, k, v = (randn(gen, 1, 2, 9, 64) for _ in range(3))
    with pytest.raises(pasa.PasaError, match=r"^q: unsupported dtype float64"):
        pasa.attention(q.double(), k, v)
    with pytest.raises(pasa.PasaError, match=r"^k: expected a torch.Tensor like q, got ndarray"):
        pasa.attention(q, k.numpy(), v)
    # (q decides the call's kind: the argument named is the one that differs from q)
    with pytest.raises(pasa.PasaError, match=r"^v: a torch.Tensor, but q is of type ndarray: give q, k and v of one kind"):
        pasa.attention(q.numpy(), k.numpy(), v)
    with pytest.raises(pasa.PasaError, match=r"^k: a torch.Tensor, but q is of type ndarray"):
        pasa.attention(q.numpy(), k, v.numpy())
    with pytest.raises(pasa.PasaError, match=r"^out: shape \(1, 2, 9, 32\) differs"):
        pasa.attention(q, k, v, out=torch.empty(1, 2, 9, 32))
    with pytest.raises(pasa.PasaError, match=r"^v: non-finite value"):
        pasa.attention(q, k, v * float("nan"))
    with pytest.raises(pasa.PasaError, match=r"unknown policy 'nope'"):
        pasa.attention(q, k, v, policy="nope")
    with pytest.raises(pasa.PasaError, match=r"^q: the head dim \(last axis\) must be contiguous"):
        pasa.attention(q.transpose(2, 3), k.transpose(2, 3), v.transpose(2, 3))
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: shape \(2, 9\) does not broadcast"):
        pasa.sdpa(q, k, v, attn_mask=torch.ones(2, 9, dtype=torch.bool))


def test_opcheck(gen):
    q = randn(gen, 1, 4, 9, 64)
    k, v = randn(gen, 1, 2, 12, 64), randn(gen, 1, 2, 12, 64)
    torch.library.opcheck(torch.ops.pasa.attention.default,
                          (q, k, v, "exact", True, "top_left", None, "bhsd", True))
    torch.library.opcheck(torch.ops.pasa.attention.default,
                          (q.half(), k.half(), v.half(), "pasa", False, "bottom_right", 0.1, "bhsd",
                           False))
    out, lse = torch.empty_like(q), torch.empty(1, 4, 9)
    torch.library.opcheck(torch.ops.pasa.attention_out.default,
                          (q, k, v, out, lse, "exact", False, "bottom_right", None, "bhsd"))
    mask = torch.rand(1, 1, 9, 12, generator=gen) > 0.2
    torch.library.opcheck(torch.ops.pasa.attention.default,
                          (q, k, v, "exact", True, "bottom_right", None, "bhsd", True, mask, 4, 0,
                           30.0))


class Attention(torch.nn.Module):
    """A small attention block calling pasa.sdpa."""

    def __init__(self, dim=128, heads=2, kv_heads=1, policy="exact"):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.policy = policy

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        o = pasa.sdpa(q, k, v, is_causal=True, enable_gqa=True, policy=self.policy)
        return o.transpose(1, 2).reshape(b, s, -1)


@pytest.mark.parametrize("policy", ["exact", "pasa"])
def test_torch_compile_fullgraph(gen, policy):
    torch.manual_seed(int(torch.randint(0, 2**30, (1,), generator=gen)))
    model = Attention(policy=policy).eval()
    x = randn(gen, 2, 21, 128)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=0)


def test_torch_compile_after_importing_pasa_before_torch():
    # isort's order: the ops were registered by the first call, inside the traced frame, which broke
    # Dynamo's guards (AssertionError: Unexpected type <class 'module'>). A fresh interpreter, so that
    # torch is imported after pasa; and one where torch is looked up first without being imported
    # (importlib.util.find_spec, as transformers' is_torch_available does).
    import subprocess
    import sys

    for lookup in ("", "import importlib.util\nimportlib.util.find_spec('torch')\n"):
        code = ("import pasa\n" + lookup + "import torch\nx = torch.randn(1, 2, 5, 16)\n"
                "got = torch.compile(lambda y: pasa.sdpa(y, y, y, is_causal=True), backend='aot_eager')(x)\n"
                "assert torch.equal(got, pasa.sdpa(x, x, x, is_causal=True))\nprint('ok')\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.strip() == "ok", (lookup, done.stderr[-2000:])


def test_serving_calls_under_torch_compile_break_the_graph_and_run(gen):
    # The device of a torch tensor came from __dlpack_device__, whose enum Dynamo cannot hold: the
    # KV-cache and packed calls crashed under torch.compile.
    caches = [torch.zeros(2, 8, 2, 16) for _ in range(4)]
    q, k, v = randn(gen, 2, 1, 4, 16), randn(gen, 2, 1, 2, 16), randn(gen, 2, 1, 2, 16)

    def step(q, k, v, k_cache, v_cache):
        return pasa.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=1, causal=True)

    torch._dynamo.reset()
    want = step(q, k, v, caches[0], caches[1])
    got = torch.compile(step, backend="aot_eager")(q, k, v, caches[2], caches[3])
    assert torch.equal(got, want) and torch.equal(caches[2], caches[0]) and torch.equal(caches[3], caches[1])
    packed, cu = randn(gen, 8, 4, 16), torch.tensor([0, 3, 8], dtype=torch.int32)

    def varlen(x):
        return pasa.attention(x, x, x, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=5)

    assert torch.equal(torch.compile(varlen, backend="aot_eager")(packed), varlen(packed))
    torch._dynamo.reset()


def test_jit_trace_records_the_op(gen):
    # The eager fast path skipped the op, so torch.jit.trace recorded only the output's allocation.
    q = randn(gen, 1, 2, 5, 16)
    with torch.no_grad():
        traced = torch.jit.trace(lambda x: pasa.sdpa(x, x, x, is_causal=True), (q,), check_trace=False)
    assert "pasa::attention" in str(traced.graph)
    other = randn(gen, 1, 2, 5, 16)
    torch.testing.assert_close(traced(other), pasa.sdpa(other, other, other, is_causal=True), atol=0, rtol=0)


def test_export_with_out_and_dynamic_shapes():
    # out='s shape was compared through int(), which specialized the symbolic sizes (non-strict).
    from torch.export import Dim, export

    class WithOut(torch.nn.Module):
        def forward(self, q, k, v, o):
            pasa.attention(q, k, v, out=o)
            return o

    b, s, t = Dim("B", max=64), Dim("S", max=4096), Dim("T", max=4096)
    q, k = torch.randn(2, 4, 9, 32), torch.randn(2, 2, 13, 32)
    shapes = {"q": {0: b, 2: s}, "k": {0: b, 2: t}, "v": {0: b, 2: t}, "o": {0: b, 2: s}}
    for strict in (True, False):
        program = export(WithOut(), (q, k, k, torch.empty_like(q)), dynamic_shapes=shapes, strict=strict)
        q2, k2 = torch.randn(3, 4, 5, 32), torch.randn(3, 2, 7, 32)
        got = program.module()(q2, k2, k2, torch.empty_like(q2))
        torch.testing.assert_close(got, pasa.attention(q2, k2, k2), atol=0, rtol=0)


def test_export_with_a_mask_keeps_dynamic_lengths():
    # The fake's mask check compared the mask's sizes through int(), which made the sequence length a
    # constant: export refused Dim("S"), and torch.compile(dynamic=True) compiled every length.
    from torch.export import Dim, export

    class Masked(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return pasa.attention(q, k, v, attn_mask=mask)

    s = Dim("S", min=2, max=4096)
    q, mask = torch.randn(1, 2, 9, 16), torch.zeros(1, 1, 9, 9)
    program = export(Masked(), (q, q, q, mask), dynamic_shapes={"q": {2: s}, "k": {2: s}, "v": {2: s},
                                                                "mask": {2: s, 3: s}})
    q2, mask2 = torch.randn(1, 2, 5, 16), torch.zeros(1, 1, 5, 5)
    torch.testing.assert_close(program.module()(q2, q2, q2, mask2), pasa.attention(q2, q2, q2, attn_mask=mask2),
                               atol=0, rtol=0)


def test_a_data_dependent_length_compiles_with_fullgraph(gen):
    # The fake's shape checks raised on a size only known when the call runs (a length from
    # nonzero()): such a test is left to the call.
    import torch._dynamo

    x = randn(gen, 1, 2, 8, 16)
    keep = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1], dtype=torch.bool)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        fn = torch.compile(lambda x, keep: pasa.attention(*(x[:, :, keep.nonzero().squeeze(1)],) * 3),
                           fullgraph=True)
        got = fn(x, keep)
    want = pasa.attention(*(x[:, :, keep.nonzero().squeeze(1)],) * 3)
    torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_torch_compile_reports_bad_policy_while_tracing(gen):
    q, k, v = (randn(gen, 1, 2, 9, 64) for _ in range(3))
    fn = torch.compile(lambda q, k, v: pasa.sdpa(q, k, v, policy="exact,zz=1"), fullgraph=True)
    with pytest.raises(Exception, match="unknown key 'zz'"):
        fn(q, k, v)


def test_policy_object_under_compile(gen):
    q, k, v = (randn(gen, 1, 2, 9, 64) for _ in range(3))
    policy = pasa.Policy("fa16,s2=32")
    fn = torch.compile(lambda q, k, v: pasa.attention(q, k, v, policy=policy), fullgraph=True)
    torch.testing.assert_close(fn(q, k, v), pasa.attention(q, k, v, policy=policy), atol=0, rtol=0)


def test_a_broadcast_bool_mask_stays_a_view(gen):
    # A padding mask [B, 1, 1, S] reaches the extension as a stride-0 view of its own bytes, not
    # copied out to [B, H, S_q, S_kv] on every call.
    from pasa import _torch

    x = randn(gen, 1, 2, 512, 16)
    mask = torch.rand(1, 1, 1, 512, generator=gen) > 0.3
    for given in (mask, mask.double()):
        view, _ = _torch._mask_argument(x, x, "bhsd", given)
        assert view.shape == (1, 1, 512, 512) and view.untyped_storage().nbytes() <= 512 * 4
    mask[..., 0] = True
    torch.testing.assert_close(pasa.sdpa(x, x, x, attn_mask=mask),
                               F.scaled_dot_product_attention(x, x, x, attn_mask=mask), atol=2e-5, rtol=0)


def test_backward_raises_and_the_forward_compiles_with_grad(gen):
    lin = torch.nn.Linear(16, 16)
    x = randn(gen, 1, 2, 5, 16)

    def f(x):
        y = lin(x)
        return pasa.attention(y, y, y)

    eager = f(x)
    assert eager.requires_grad
    with pytest.raises(pasa.PasaError, match=r"no backward \(inference only\)"):
        eager.sum().backward()
    compiled = torch.compile(f)(x)  # its backward graph is built while compiling
    torch.testing.assert_close(compiled, eager)
    with pytest.raises(pasa.PasaError, match=r"no backward \(inference only\)"):
        compiled.sum().backward()


def test_calls_that_would_lose_a_derivative_or_a_batch_raise(gen):
    q, k, v = (randn(gen, 1, 2, 5, 16) for _ in range(3))
    with pytest.raises(pasa.PasaError, match=r"^out: pasa.attention with out= does not record autograd"):
        pasa.attention(q.clone().requires_grad_(), k, v, out=torch.empty_like(q))
    with torch.no_grad():
        out = pasa.attention(q.clone().requires_grad_(), k, v, out=torch.empty_like(q))
    torch.testing.assert_close(out, pasa.attention(q, k, v))
    fwad = torch.autograd.forward_ad
    with fwad.dual_level():
        with pytest.raises(pasa.PasaError, match=r"^q: a dual tensor \(forward-mode AD\)"):
            pasa.attention(fwad.make_dual(q, torch.ones_like(q)), k, v)
        torch.testing.assert_close(pasa.attention(q, k, v), out)  # plain tensors inside the level run
    with pytest.raises(pasa.PasaError, match=r"^q: a tensor of a torch.func transform"):
        torch.func.vmap(lambda x: pasa.attention(x, k, v))(q[None].expand(3, -1, -1, -1, -1))


def test_tensors_with_a_lazy_sign_are_refused_by_name(gen, tmp_path):
    # torch's negative bit (z.conj().imag is public API): DLPack hands over the memory, which holds
    # the values unnegated, so pasa computed with -mask, or q (an error of 2.4 on this mask).
    q, k, v = (randn(gen, 1, 2, 5, 8) for _ in range(3))
    mask = torch.randn(1, 1, 5, 5, dtype=torch.complex64, generator=gen).conj().imag
    assert mask.is_neg()
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: a tensor with torch's negative bit set .* "
                                             r"pass attn_mask.resolve_neg\(\)"):
        pasa.attention(q, k, v, attn_mask=mask)
    got = pasa.attention(q, k, v, attn_mask=mask.resolve_neg())
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            attn_mask=mask.resolve_neg().double())
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: a tensor with torch's negative bit set"):
        pasa.reference(q, k, v, attn_mask=mask)
    negated = torch._neg_view(q) if hasattr(torch, "_neg_view") else None
    if negated is not None:
        with pytest.raises(pasa.PasaError, match=r"^q: a tensor with torch's negative bit set"):
            pasa.attention(negated, k, v)
        with pytest.raises(pasa.PasaError, match=r"^out: a tensor with torch's negative bit set"):
            pasa.attention(q, k, v, out=torch._neg_view(torch.empty_like(q)))
        path = tmp_path / "q.npy"  # a file holds the tensor's values
        pasa.save(path, torch._neg_view(-q))
        np.testing.assert_array_equal(np.asarray(pasa.load(path)), q.numpy())
        k_cache = torch._neg_view(randn(gen, 2, 4, 2, 8))
        with pytest.raises(pasa.PasaError, match=r"^k_cache: a tensor with torch's negative bit set"):
            pasa.attention_with_kvcache(randn(gen, 1, 1, 2, 8), k_cache, randn(gen, 2, 4, 2, 8),
                                        cache_seqlens=3, block_table=torch.tensor([[0, 1]], dtype=torch.int32))


def test_tensor_kinds_and_devices(gen, tmp_path):
    q, k, v = (randn(gen, 1, 2, 5, 16) for _ in range(3))
    with pytest.raises(pasa.PasaError, match=r"^out: on meta but q is on cpu"):
        pasa.attention(q, k, v, out=torch.empty_like(q, device="meta"))
    # (a meta k or mask beside CPU q reached the op's fake: uninitialized memory returned as O)
    with pytest.raises(pasa.PasaError, match=r"^k: on meta but q is on cpu"):
        pasa.attention(q, k.to("meta"), v)
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: on meta but q is on cpu"):
        pasa.sdpa(q, k, v, attn_mask=torch.ones(5, 5, dtype=torch.bool, device="meta"))
    meta = torch.empty(1, 2, 5, 16, device="meta")
    got = pasa.attention(meta, meta, meta)  # the op's fake: shapes without data
    assert got.device.type == "meta" and got.shape == meta.shape
    # The fake refuses the shapes the call refuses (it gave meta outputs, of the wrong shape for a v
    # of another head dim, so torch.export traced calls that fail when they run).
    def empty(*shape):
        return torch.empty(*shape, device="meta")

    for (k_m, v_m), needle in (((meta, empty(1, 2, 5, 17)), r"^v: shape \[1, 2, 5, 17\] differs from k's"),
                               ((empty(1, 3, 5, 16), empty(1, 3, 5, 16)), r"^k: 3 K/V heads do not divide the 2"),
                               ((meta, empty(1, 2, 7, 16)), r"^v: shape \[1, 2, 7, 16\] differs from k's"),
                               ((empty(1, 2, 5, 8), empty(1, 2, 5, 8)), r"^k: head dim 8 differs from q's 16")):
        with pytest.raises(pasa.PasaError, match=needle):
            pasa.attention(meta, k_m, v_m)
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: shape \(5, 8\) does not broadcast"):
        pasa.attention(meta, meta, meta, attn_mask=empty(5, 8))
    with pytest.raises(pasa.PasaError, match=r"^q: batch size is 0"):
        pasa.attention(empty(0, 2, 5, 16), empty(0, 2, 5, 16), empty(0, 2, 5, 16))
    # The registered ops called directly: one meta argument makes the dispatcher run the fake, which
    # returned uninitialized memory (attention) or left out unwritten (attention_out).
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: on meta but q is on cpu"):
        torch.ops.pasa.attention(q, k, v, "exact", False, "top_left", None, "bhsd", False,
                                 torch.zeros(5, 5, device="meta"))
    with pytest.raises(pasa.PasaError, match=r"^k: on meta but q is on cpu"):
        torch.ops.pasa.attention_out(q, k.to("meta"), v, torch.empty_like(q), None, "exact", False,
                                     "top_left", None, "bhsd")
    with pytest.raises(pasa.PasaError, match=r"^out: shape \(1, 2, 5, 15\) differs from q's \(1, 2, 5, 16\)"):
        torch.ops.pasa.attention_out(q, k, v, torch.empty(1, 2, 5, 15), None, "exact", False, "top_left",
                                     None, "bhsd")
    # The paths that read values name a meta tensor instead of failing in DLPack or .cpu().
    q3 = q[0].transpose(0, 1).contiguous()  # [total tokens, H, D]
    packed = dict(cu_seqlens_q=[0, 5], cu_seqlens_k=[0, 5], max_seqlen_q=5, max_seqlen_k=5)
    with pytest.raises(pasa.PasaError, match=r"^k: on meta but q is on cpu"):
        pasa.attention(q3, q3.to("meta"), q3, **packed)
    with pytest.raises(pasa.PasaError, match=r"^q: on meta"):
        pasa.attention_with_kvcache(q3[None].to("meta"), q3[None], q3[None], cache_seqlens=5)
    with pytest.raises(pasa.PasaError, match=r"^q: a meta tensor"):
        pasa.reference(q.to("meta"), k, v)
    with pytest.raises(pasa.PasaError, match=r"a meta tensor"):
        pasa.save(tmp_path / "q.npy", q.to("meta"))
    assert not (tmp_path / "q.npy").exists()
    with pytest.raises(pasa.PasaError, match=r"^q: a sparse_coo tensor"):
        pasa.attention(q.to_sparse(), k, v)
    # (every call that reads arrays, not only the dense one)
    mask = torch.zeros(q.shape[2], k.shape[2])
    with pytest.raises(pasa.PasaError, match=r"^q: a sparse_coo tensor"):
        pasa.reference(q.to_sparse(), k, v)
    with pytest.raises(pasa.PasaError, match=r"^attn_mask: a sparse_coo tensor"):
        pasa.reference(q, k, v, attn_mask=mask.to_sparse())
    with pytest.raises(pasa.PasaError, match=r"^q: a sparse_coo tensor"):
        pasa.attention(q3.to_sparse(), q3, q3, **packed)
    with pytest.raises(pasa.PasaError, match=r"^q: a nested tensor"):
        pasa.attention(torch.nested.nested_tensor([q3]), q3, q3, **packed)
    with pytest.raises(pasa.PasaError, match=r"^q: a sparse_coo tensor"):
        pasa.attention_with_kvcache(q3[None].to_sparse(), q3[None], q3[None], cache_seqlens=5)
    with pytest.raises(pasa.PasaError, match=r"^cache_seqlens: a sparse_coo tensor"):
        pasa.attention_with_kvcache(q3[None], q3[None], q3[None], cache_seqlens=torch.tensor([5]).to_sparse())
    if hasattr(torch, "float8_e5m2"):
        with pytest.raises(pasa.PasaError, match=r"^attn_mask: unsupported dtype float8_e5m2"):
            pasa.reference(q, k, v, attn_mask=mask.to(torch.float8_e5m2))
    if hasattr(torch, "float8_e4m3fn"):
        with pytest.raises(pasa.PasaError, match=r"^q: unsupported dtype float8_e4m3fn"):
            pasa.attention(q.to(torch.float8_e4m3fn), k, v)


def test_sdpa_under_autocast_runs_in_the_autocast_dtype_as_torch(gen):
    # torch's SDPA under torch.autocast casts its floating-point operands (a float mask too) to the
    # autocast dtype and answers in it; the drop-in and a patched model do the same.
    q, k, v = (randn(gen, 1, 2, 9, 16) for _ in range(3))
    mask = torch.zeros(9, 9)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        got = pasa.sdpa(q, k, v, attn_mask=mask)
    assert want.dtype == got.dtype == torch.bfloat16
    plain = pasa.sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), attn_mask=mask.bfloat16())
    assert torch.equal(got, plain)

    class Attend(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    model = Attend()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), pasa.patch(model, policy="exact") as patch:
        routed = model(q, k, v)
    assert routed.dtype == torch.bfloat16 and patch.calls == 1 and patch.fallbacks == 0
    # (outside autocast nothing is cast)
    assert pasa.sdpa(q, k, v).dtype == torch.float32
