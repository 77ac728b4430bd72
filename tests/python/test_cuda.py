# SPDX-License-Identifier: Apache-2.0
"""The CUDA path through torch: run on the device (an H200 with torch; any GPU of compute capability
8.0 or newer runs them). Skipped without a GPU or without a pasa build that has the CUDA kernels.

Tolerances follow DESIGN.md: a kernel's error against the fp64 reference is at most k x the error
of the CPU emulator running the same policy (or of torch's SDPA for the drop-in), plus a small atol.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
F = torch.nn.functional

import numpy as np  # noqa: E402

import pasa  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not pasa.built_with_cuda:
    pytest.skip("this pasa build has no CUDA kernels (built without nvcc, or before they landed)",
                allow_module_level=True)

K = 2.0  # kernel error <= K x emulator / torch error + ATOL
ATOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}

# (B, H_q, H_kv, S_q, S_kv, D): the foundation issue's awkward shapes.
SHAPES = [
    (1, 1, 1, 1, 1, 64),
    (2, 4, 4, 17, 17, 64),
    (1, 8, 2, 1013, 1013, 128),
    (2, 4, 1, 77, 300, 128),
    (1, 2, 2, 300, 77, 64),
    (1, 16, 16, 1024, 1024, 128),
]


@pytest.fixture
def gen(rng):
    return torch.Generator(device="cuda").manual_seed(int(rng.integers(2**62)))


def randn(gen, *shape, dtype):
    return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)


def max_err(x, ref):
    return (x.double().cpu() - torch.from_numpy(ref)).abs().max().item()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_matches_torch_sdpa(gen, shape, dtype, is_causal):
    b, h_q, h_kv, s_q, s_kv, d = shape
    q = randn(gen, b, h_q, s_q, d, dtype=dtype)
    k, v = randn(gen, b, h_kv, s_kv, d, dtype=dtype), randn(gen, b, h_kv, s_kv, d, dtype=dtype)
    gqa = h_q != h_kv
    poison = torch.full_like(q, float("nan"))
    got = pasa.attention(q, k, v, causal=is_causal, causal_alignment="top_left", out=poison)
    torch.cuda.synchronize()
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=gqa)
    ref = pasa.reference(q, k, v, causal=is_causal, causal_alignment="top_left")
    assert torch.isfinite(got).all()
    assert max_err(got, ref) <= K * max_err(want, ref) + ATOL[dtype]
    torch.testing.assert_close(pasa.sdpa(q, k, v, is_causal=is_causal, enable_gqa=gqa), got,
                               atol=0, rtol=0)


@pytest.mark.parametrize("policy, d", [("exact", 128), ("fa16", 128), ("pasa", 128), ("pasa", 96),
                                       ("pasa", 256)])
def test_kernel_against_emulator(gen, policy, d):
    q, k, v = (randn(gen, 1, 4, 333, d, dtype=torch.float16) for _ in range(3))
    try:
        got, lse = pasa.attention(q, k, v, policy=policy, causal=True, return_lse=True)
    except pasa.PasaError as error:
        pytest.skip(f"the kernels do not run policy {policy!r}: {error}")
    emulated, emulated_lse = pasa.attention(q.cpu(), k.cpu(), v.cpu(), policy=policy, causal=True,
                                            return_lse=True)
    ref, ref_lse = pasa.reference(q, k, v, causal=True, return_lse=True)
    assert max_err(got, ref) <= K * max_err(emulated, ref) + ATOL[torch.float16]
    assert max_err(lse, ref_lse) <= K * max_err(emulated_lse, ref_lse) + 1e-3


def _random_view(gen, b, h, s, d, dtype, view):
    """A [b, h, s, d] CUDA tensor stored as `view` says: contiguous, a slice of a longer sequence
    (storage offset, sequence stride above d), or a [b, s, h, d] tensor seen through a transpose."""
    if view == "sliced":
        return randn(gen, b, h, s + 5, d, dtype=dtype)[:, :, 3:3 + s]
    if view == "transposed":
        return randn(gen, b, s, h, d, dtype=dtype).transpose(1, 2)
    return randn(gen, b, h, s, d, dtype=dtype)


@pytest.mark.parametrize("draw", range(24))
def test_random_problems_against_emulator(gen, rng, draw):
    """Random shapes, GQA ratios, causal alignments, layouts and strided views through the Python
    API: the kernel's O and LSE against fp64 no worse than K x the emulator's on the same inputs."""
    policy = str(rng.choice(["exact", "pasa", "pasa_accurate", "sage8", "sage_fp8"]))
    dtype = [torch.float16, torch.bfloat16][int(rng.integers(2))]
    d = int(rng.choice([64, 128, 96, 256] if policy in ("exact", "pasa", "pasa_accurate") else [64, 128]))
    h_kv = int(rng.integers(1, 3))
    h_q = h_kv * int(rng.choice([1, 2, 4]))
    b = 1 if h_q >= 4 else int(rng.integers(1, 3))  # (the emulator's share of the time stays ~1 s)
    s_q = int(rng.choice([1, 7, 127, 129, int(rng.integers(1, 300))]))
    s_kv = int(rng.choice([s_q, 1, 130, int(rng.integers(1, 300))]))
    causal, alignment = bool(rng.integers(2)), str(rng.choice(["bottom_right", "top_left"]))
    layout, view = str(rng.choice(["bhsd", "bshd"])), str(rng.choice(["contiguous", "sliced", "transposed"]))
    q = _random_view(gen, b, h_q, s_q, d, dtype, view)
    k, v = (_random_view(gen, b, h_kv, s_kv, d, dtype, view) for _ in range(2))
    if layout == "bshd":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    options = dict(policy=policy, causal=causal, causal_alignment=alignment, layout=layout, return_lse=True)
    print(f"draw: {policy} {dtype} B {b} H {h_q}/{h_kv} S {s_q}/{s_kv} D {d} causal {causal} {alignment} "
          f"{layout} {view}")
    hopper = torch.cuda.get_device_capability(q.device) == (9, 0)
    if policy.startswith("sage") and not hopper:
        pytest.skip(f"{policy} runs on the Hopper path only")
    got, lse = pasa.attention(q, k, v, **options)
    emulated, emulated_lse = pasa.attention(q.cpu(), k.cpu(), v.cpu(), **options)
    ref, ref_lse = pasa.reference(q, k, v, policy=policy, causal=causal, causal_alignment=alignment,
                                  layout=layout, return_lse=True)
    assert got.shape == q.shape and lse.shape == (b, h_q, s_q)
    assert max_err(got, ref) <= K * max_err(emulated, ref) + ATOL[dtype]
    empty = np.isneginf(ref_lse)  # rows that see no key (bottom-right alignment, S_q > S_kv)
    assert np.isneginf(lse.cpu().numpy()[empty]).all()
    seen = ~empty
    if seen.any():
        lse_err = np.abs(lse.double().cpu().numpy()[seen] - ref_lse[seen]).max()
        assert lse_err <= K * np.abs(emulated_lse.double().numpy()[seen] - ref_lse[seen]).max() + 1e-3


def test_bshd_and_lse(gen):
    q, k, v = (randn(gen, 2, 130, 4, 64, dtype=torch.bfloat16) for _ in range(3))
    out, lse = pasa.attention(q, k, v, layout="bshd", return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 4, 130) and lse.device == q.device
    want = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(out.float(), want.float(), atol=2e-2, rtol=0)


def test_side_stream(gen):
    q, k, v = (randn(gen, 1, 8, 512, 128, dtype=torch.float16) for _ in range(3))
    want = pasa.sdpa(q, k, v)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = pasa.sdpa(q, k, v)
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("policy", ["exact", "pasa"])
def test_cuda_graph_replay(gen, policy):
    q, k, v = (randn(gen, 2, 8, 256, 64, dtype=torch.float16) for _ in range(3))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside the graph
        pasa.sdpa(q, k, v, is_causal=True, policy=policy)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pasa.sdpa(q, k, v, is_causal=True, policy=policy)
    for _ in range(3):
        for x in (q, k, v):
            x.copy_(randn(gen, *x.shape, dtype=x.dtype))
        graph.replay()
        want = pasa.sdpa(q, k, v, is_causal=True, policy=policy)
        torch.testing.assert_close(out, want, atol=0, rtol=0)


class Attention(torch.nn.Module):
    def __init__(self, dim=256, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.o = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, self.head_dim).unbind(2)
        o = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=True)
        return self.o(o.transpose(1, 2).reshape(b, s, -1))


class PasaAttention(Attention):
    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, self.head_dim).unbind(2)
        o = pasa.sdpa(q, k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True)
        return self.o(o.transpose(1, 2).reshape(b, s, -1))


def test_torch_compile_fullgraph(gen):
    model = PasaAttention().cuda().half().eval()
    x = randn(gen, 2, 300, 256, dtype=torch.float16)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, atol=2e-3, rtol=0)


def test_capture_and_patch_on_cuda(tmp_path, gen):
    model = torch.nn.Sequential(Attention(), Attention()).cuda().bfloat16().eval()
    x = randn(gen, 2, 128, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        with pasa.capture(tmp_path, model=model) as cap:
            model(x)
        with pasa.patch(model, policy="exact") as handle:
            got = model(x)
    assert [e["layer"] for e in cap.entries] == ["0", "1"] and handle.calls == 2
    t = pasa.load(tmp_path / "layer1.safetensors")
    assert t["q"].shape == (2, 4, 128, 64) and t["k"].shape == (2, 2, 128, 64)
    torch.testing.assert_close(got.float(), want.float(), atol=3e-2, rtol=0)


@pytest.mark.parametrize("policy", ["exact", "pasa"])
def test_eager_calls_plan_once_per_problem(gen, policy):
    # Eager calls on plain tensors run a plan cached on shapes, strides, dtypes, devices and options;
    # the custom op (what torch.compile and autograd-tracking tensors take) plans every call.
    from pasa import _torch

    op = torch.ops.pasa.attention
    decode_q = randn(gen, 1, 32, 1, 128, dtype=torch.float16)
    kv = randn(gen, 1, 4096, 16, 128, dtype=torch.float16)  # bshd storage: k, v strided views
    k_strided, v_strided = kv[:, :, :8].transpose(1, 2), kv[:, :, 8:].transpose(1, 2)
    for q, k, v in [(decode_q, *(randn(gen, 1, 8, 4096, 128, dtype=torch.float16) for _ in range(2))),
                    (decode_q, k_strided, v_strided),
                    (randn(gen, 2, 4, 333, 64, dtype=torch.float16), *(
                        randn(gen, 2, 4, 333, 64, dtype=torch.float16) for _ in range(2)))]:
        for causal in (False, True):
            plans = None
            for _ in range(2):  # the second call runs the first one's plan
                got, lse = pasa.attention(q, k, v, policy=policy, causal=causal, return_lse=True)
                want, want_lse = op(q, k, v, policy, causal, "bottom_right", None, "bhsd", True)
                torch.testing.assert_close(got, want, atol=0, rtol=0)
                torch.testing.assert_close(lse, want_lse, atol=0, rtol=0)
                assert plans is None or len(_torch._plans) == plans
                plans = len(_torch._plans)
                q = q + 1  # new data, same problem


@pytest.mark.parametrize("shape", [(1, 32, 8, 1, 4096, 128), (2, 8, 8, 1024, 1024, 128)])
def test_eager_workspaces_are_per_stream_and_graphs_keep_their_own(gen, shape):
    # Eager calls on one stream share one workspace (a split-KV decode's partials; an sm_90a prefill's
    # tile counter). A call captured in a CUDA graph takes its own, so replays on another stream may
    # run while eager calls use the stream's.
    from pasa import _torch

    B, Hq, Hkv, Sq, Skv, D = shape
    q = randn(gen, B, Hq, Sq, D, dtype=torch.bfloat16)
    k, v = (randn(gen, B, Hkv, Skv, D, dtype=torch.bfloat16) for _ in range(2))
    q2, k2, v2 = (x.flip(-2) for x in (q, k, v))  # the eager calls' inputs: other data, same problem
    want, want2 = pasa.attention(q, k, v, causal=True), pasa.attention(q2, k2, v2, causal=True)
    cached = {key: w.data_ptr() for key, w in _torch._workspaces.items()}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pasa.attention(q, k, v, causal=True)
    assert {key: w.data_ptr() for key, w in _torch._workspaces.items()} == cached
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    for _ in range(20):
        with torch.cuda.stream(side):
            graph.replay()
        torch.testing.assert_close(pasa.attention(q2, k2, v2, causal=True), want2, atol=0, rtol=0)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(out, want, atol=0, rtol=0)


def test_device_mismatch_names_the_argument(gen):
    q, k, v = (randn(gen, 1, 2, 16, 64, dtype=torch.float16) for _ in range(3))
    with pytest.raises(pasa.PasaError, match=r"^k: on cpu but q is on cuda:0"):
        pasa.attention(q, k.cpu(), v)


def test_cupy_arrays(gen):
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    q, k, v = (randn(gen, 1, 4, 200, 64, dtype=torch.float16) for _ in range(3))
    cq, ck, cv = (cupy.from_dlpack(x) for x in (q, k, v))
    out, lse = pasa.attention(cq, ck, cv, causal=True, return_lse=True)
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float16 and lse.shape == (1, 4, 200)
    want = pasa.attention(q, k, v, causal=True)
    torch.testing.assert_close(torch.from_dlpack(out), want, atol=0, rtol=0)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_padding_masks_of_the_dtype_minimum(gen, d):
    # Additive padding masks of a dtype's minimum, as transformers builds them: keys masked past 150,
    # a row masked whole, a whole first key block of another row; masks in fp32 and in the inputs'
    # dtype. fp32's minimum times 1 / |alpha| is past fp32's range, so the kernels floor what a finite
    # mask value adds (kernel_params.h, mask_floor): finite everywhere, and a row masked whole averages
    # its keys as exact attention and the CPU emulator do (not O = 0).
    for dtype in (torch.float16, torch.bfloat16):
        q = randn(gen, 2, 4, 200, d, dtype=dtype)
        k, v = (randn(gen, 2, 4, 300, d, dtype=dtype) for _ in range(2))
        for mask_dtype in (torch.float32, dtype):
            mask = torch.zeros(2, 1, 200, 300, device="cuda", dtype=mask_dtype)
            low = torch.finfo(mask_dtype).min
            mask[..., 150:] = low
            mask[:, :, 3, :] = low
            mask[1, :, 5, :128] = low
            got = pasa.attention(q, k, v, attn_mask=mask)
            want = pasa.attention(q.cpu(), k.cpu(), v.cpu(), attn_mask=mask.cpu())
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got.cpu().float(), want.float(), atol=ATOL[dtype], rtol=2e-3)
            if mask_dtype != torch.float16:  # (fp16's minimum leaves the scores' differences)
                whole_row = v.float().mean(dim=2)  # the row masked whole: every key weighs the same
                torch.testing.assert_close(got[:, :, 3].float(), whole_row, atol=ATOL[dtype], rtol=2e-3)


@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_window_softcap_and_mask_on_cuda_or_fall_back(gen, d):
    # Windows, softcaps and masks (bool and additive) run on the exact kernels, as the CPU emulator
    # runs them: the sm_90a one at D 64 and 128 on an H100 / H200, the portable one elsewhere, at
    # D 96 and 256 and for a negative scale (the last two calls). Other policies raise a PasaError
    # naming them, and pasa.patch sends such calls to torch (counted), so a model with a padding
    # mask still runs.
    q, k, v = (randn(gen, 1, 2, 160, d, dtype=torch.float16) for _ in range(3))
    mask = torch.ones(1, 1, 160, 160, dtype=torch.bool, device="cuda").tril()
    mask[..., 100:, 20:40] = False
    empty_row = mask.clone()
    empty_row[..., 7, :] = False  # a row with no visible key: O = 0
    bias = torch.randn(1, 2, 1, 160, device="cuda", generator=gen) * 2
    for kwargs in (dict(window_size=(40, 0)), dict(softcap=2.0, scale=1.0),
                   dict(window_size=(30, 10), softcap=5.0), dict(attn_mask=mask),
                   dict(attn_mask=bias.half(), softcap=3.0), dict(attn_mask=bias, causal=True),
                   dict(attn_mask=bias.bfloat16(), window_size=(50, -1), scale=-0.1),
                   dict(attn_mask=empty_row, softcap=4.0, scale=-1.0)):
        got = pasa.attention(q, k, v, **kwargs)
        host = {key: (x.cpu() if isinstance(x, torch.Tensor) else x) for key, x in kwargs.items()}
        want = pasa.attention(q.cpu(), k.cpu(), v.cpu(), **host)
        torch.testing.assert_close(got.cpu().float(), want.float(), atol=2e-3, rtol=2e-3)
    if d in (64, 128):  # (sage8's head dims: at others the refusal names the head dim)
        with pytest.raises(pasa.PasaError, match="sliding window, softcap or attention mask"):
            pasa.attention(q, k, v, policy="sage8", window_size=(40, 0))

    class Masked(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    pasa.stats(reset=True)
    module = Masked()
    # (No pasa kernel has a mask: the routing says so from the call's metadata, at every head dim.)
    with torch.no_grad(), pytest.warns(pasa.PasaFallbackWarning, match="take no attention mask"):
        with pasa.patch(module, policy="pasa") as handle:
            got = module(q, k, v)
    assert handle.fallbacks == 1 and handle.calls == 0 and pasa.stats()["fallbacks"] == 1
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
