# SPDX-License-Identifier: Apache-2.0
"""pasa as a diffusers attention processor, on small random-initialised models built from configs
(no downloads): a DiT (self-attention over image patches) and PixArt-alpha (self-attention, and
cross-attention to caption tokens under a padding mask) against diffusers' default processor, and an
``Attention`` module with grouped-query heads against torch. On the CPU, and on the GPU (the last
test; skipped without CUDA). Skipped where torch or diffusers is not installed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: diffusers processor untested")
diffusers = pytest.importorskip("diffusers",
                                reason="diffusers is not installed: diffusers processor untested")

import pasa  # noqa: E402
import pasa.integrations.diffusers as pasa_diffusers  # noqa: E402
from diffusers.models.attention_processor import (  # noqa: E402
    Attention, AttnProcessor2_0, FusedAttnProcessor2_0)

# exact runs every rounding point in float32, as torch's float32 SDPA does, in another order: the
# outputs differ by float32 roundings accumulated through a block (unit roundoff 2^-24 times a
# growth of 2^12 for the D- and S-long sums, the projections and the norms), relative to their
# scale.
EXACT_TOLERANCE = 2.0**-24 * 2**12


def dit(head_dim=8, sample=8):
    return diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=head_dim, in_channels=4, num_layers=1,
        sample_size=sample, patch_size=2, num_embeds_ada_norm=10)


def pixart(head_dim=8, sample=8):
    return diffusers.PixArtTransformer2DModel(
        num_attention_heads=2, attention_head_dim=head_dim, in_channels=4, out_channels=8,
        num_layers=1, cross_attention_dim=2 * head_dim, sample_size=sample, patch_size=2,
        caption_channels=12, use_additional_conditions=False)


def build(make, seed, **config):
    torch.manual_seed(seed)
    model = make(**config).eval()
    with torch.no_grad():  # (zero-initialised output layers would hide the attention)
        for parameter in model.parameters():
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else 4
            parameter.normal_(0.0, fan_in**-0.5)
    return model


def dit_inputs(gen, model, device="cpu", dtype=torch.float32):
    sample = model.config.sample_size
    x = torch.randn(2, 4, sample, sample, generator=gen).to(device, dtype)
    return dict(hidden_states=x, timestep=torch.tensor([3, 7], device=device),
                class_labels=torch.tensor([1, 4], device=device))


def pixart_inputs(gen, model, device="cpu", dtype=torch.float32):
    sample = model.config.sample_size
    x = torch.randn(2, 4, sample, sample, generator=gen).to(device, dtype)
    caption = torch.randn(2, 9, 12, generator=gen).to(device, dtype)
    keep = torch.ones(2, 9, device=device)
    keep[1, 5:] = 0  # the second caption is 5 tokens long: 4 padding tokens it must not see
    return dict(hidden_states=x, encoder_hidden_states=caption, encoder_attention_mask=keep,
                timestep=torch.tensor([3, 7], device=device),
                added_cond_kwargs={"resolution": None, "aspect_ratio": None})


def run(model, inputs):
    with torch.no_grad():
        return model(**inputs).sample


def processors(model):
    return [m.processor for m in model.modules() if isinstance(m, Attention)]


@pytest.mark.parametrize("make, inputs", [(dit, dit_inputs), (pixart, pixart_inputs)],
                         ids=["dit", "pixart"])
def test_matches_the_default_processor(rng, make, inputs):
    seed = int(rng.integers(2**31))
    print(f"model seed {seed}")
    model = build(make, seed)
    assert all(isinstance(p, AttnProcessor2_0) for p in processors(model))
    given = inputs(torch.Generator().manual_seed(seed), model)
    want = run(model, given)
    names = pasa_diffusers.register(model)
    assert len(names) == len(processors(model)) >= 1
    assert all(isinstance(p, pasa_diffusers.PasaAttnProcessor) for p in processors(model))
    pasa.stats(reset=True)
    got = run(model, given)
    assert pasa.stats() == {"calls": len(names), "fallbacks": 0, "reasons": {}}
    assert (got - want).abs().max() <= EXACT_TOLERANCE * want.abs().max()
    assert pasa_diffusers.unregister(model) == names
    assert all(type(p) is AttnProcessor2_0 for p in processors(model))
    assert torch.equal(run(model, given), want)


def test_the_padding_mask_reaches_the_cross_attention(rng):
    # Changing what the padded caption tokens hold moves nothing; changing a kept one does (so the
    # processor applies the mask, and the mask is not vacuous).
    seed = int(rng.integers(2**31))
    print(f"model seed {seed}")
    model = build(pixart, seed)
    pasa_diffusers.register(model)
    given = pixart_inputs(torch.Generator().manual_seed(seed), model)
    pasa.stats(reset=True)
    base = run(model, given)
    for token, moves in ((7, False), (2, True)):
        changed = dict(given, encoder_hidden_states=given["encoder_hidden_states"].clone())
        changed["encoder_hidden_states"][1, token] += 3.0
        delta = (run(model, changed)[1] - base[1]).abs().max()
        assert (delta > 1e-3) == moves, (token, float(delta))
    assert pasa.stats()["fallbacks"] == 0  # pasa itself applied the mask


def test_grouped_query_heads_and_image_inputs(rng):
    # Attention(kv_heads=2) over 4 query heads, on a [B, C, H, W] input with a residual connection,
    # against torch's SDPA with K and V repeated per group.
    seed = int(rng.integers(2**31))
    print(f"seed {seed}")
    torch.manual_seed(seed)
    attn = Attention(query_dim=32, heads=4, kv_heads=2, dim_head=8, residual_connection=True,
                     processor=pasa_diffusers.PasaAttnProcessor()).eval()
    x = torch.randn(2, 32, 3, 5)
    pasa.stats(reset=True)
    with torch.no_grad():
        got = attn(x)
    assert pasa.stats()["fallbacks"] == 0  # pasa itself took the grouped heads
    with torch.no_grad():
        tokens = x.flatten(2).transpose(1, 2)
        q, k, v = (proj(tokens).view(2, 15, -1, 8).transpose(1, 2)
                   for proj in (attn.to_q, attn.to_k, attn.to_v))
        k, v = (t.repeat_interleave(2, dim=1) for t in (k, v))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        o = attn.to_out[0](o.transpose(1, 2).reshape(2, 15, 32))
        want = o.transpose(1, 2).reshape(x.shape) + x
    assert got.shape == x.shape
    assert (got - want).abs().max() <= EXACT_TOLERANCE * want.abs().max()


def test_register_replaces_the_default_processors_only():
    # Processors of other kinds compute something else (here: fused projections); registering again
    # switches the policy.
    modules = torch.nn.ModuleDict({
        "plain": Attention(query_dim=16, heads=2, dim_head=8),
        "other": Attention(query_dim=16, heads=2, dim_head=8, processor=FusedAttnProcessor2_0())})
    assert pasa_diffusers.register(modules) == ["plain"]
    assert type(modules["other"].processor) is FusedAttnProcessor2_0
    assert pasa_diffusers.register(modules, policy="fa16") == ["plain"]
    assert modules["plain"].processor.policy == str(pasa.Policy("fa16"))


def test_fallback_and_strict(rng):
    # With autograd the processor runs torch's SDPA (warned once, counted), or raises with
    # strict=True.
    seed = int(rng.integers(2**31))
    model = build(dit, seed)
    given = dit_inputs(torch.Generator().manual_seed(seed), model)
    with torch.no_grad():
        want = model(**given).sample
    pasa_diffusers.register(model)
    pasa.stats(reset=True)
    with pytest.warns(pasa.PasaFallbackWarning, match="autograd"):
        got = model(**given).sample
    assert pasa.stats()["reasons"] == {"autograd": 1}
    torch.testing.assert_close(got.detach(), want)
    with pasa.patch(model):  # (the fallback is torch's own call, not routed, and counted, again)
        pasa.stats(reset=True)
        model(**given)
        assert pasa.stats()["reasons"] == {"autograd": 1}
    for bad in ("False", 1):
        with pytest.raises(pasa.PasaError, match=rf"^strict: expected True or False, got {bad!r}"):
            pasa_diffusers.register(model, strict=bad)
    pasa_diffusers.register(model, strict=True)  # (replaces the processors it set)
    assert all(p.strict for p in processors(model))
    with pytest.raises(pasa.PasaError, match="autograd"):
        model(**given)


@pytest.mark.skipif(not (torch.cuda.is_available() and pasa.built_with_cuda),
                    reason="no CUDA device, or a pasa build without the CUDA kernels")
@pytest.mark.parametrize("make, inputs", [(dit, dit_inputs), (pixart, pixart_inputs)],
                         ids=["dit", "pixart"])
def test_gpu_matches_the_default_processor(rng, make, inputs):
    # Head dim 64 in fp16, 64 image tokens: the GPU kernels run every call (the exact policy's
    # prefill kernel; the padding mask of PixArt's cross-attention included).
    seed = int(rng.integers(2**31))
    print(f"model seed {seed}")
    model = build(make, seed, head_dim=64, sample=16).to("cuda", torch.float16)
    given = inputs(torch.Generator().manual_seed(seed), model, "cuda", torch.float16)
    want = run(model, given).float()
    names = pasa_diffusers.register(model)
    pasa.stats(reset=True)
    got = run(model, given).float()
    assert pasa.stats() == {"calls": len(names), "fallbacks": 0, "reasons": {}}, pasa.stats()
    # fp16 activations: both round at fp16 (unit roundoff 2^-11) with fp32 accumulation; a growth
    # of 2^6 through the block, relative to the output's scale.
    assert (got - want).abs().max() <= 2.0**-11 * 2**6 * want.abs().max()
