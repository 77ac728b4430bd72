# SPDX-License-Identifier: Apache-2.0
"""pasa as a transformers attention backend, on small random-initialised Llama- and Qwen2-style
models built from configs (no downloads): logits against transformers' "sdpa" implementation and
32 greedy tokens with a KV cache. Skipped where torch or transformers is not installed."""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: transformers backend untested")
transformers = pytest.importorskip("transformers",
                                   reason="transformers is not installed: backend untested")

import pasa  # noqa: E402
import pasa.integrations.transformers as pasa_hf  # noqa: E402

# exact runs every rounding point in float32, as torch's float32 SDPA does, in another order: the
# logits differ by float32 roundings accumulated through the layers (unit roundoff 2^-24 times a
# growth of 2^12 for two layers of D- and S-long sums), relative to the logits' scale.
EXACT_TOLERANCE = 2.0**-24 * 2**12


def llama_config():
    return transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def qwen2_config():
    # Sliding window on the second layer only (max_window_layers=1), shorter than the prompts.
    return transformers.Qwen2Config(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128,
        use_sliding_window=True, sliding_window=6, max_window_layers=1)


def build(config, implementation, seed):
    """A model with weights drawn from `seed`; each model gets its own copy of the config, which
    holds the attention implementation."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                          attn_implementation="sdpa")
    model.eval()
    if implementation != "sdpa":
        other = transformers.AutoModelForCausalLM.from_config(
            copy.deepcopy(config), attn_implementation=implementation)
        other.load_state_dict(model.state_dict())
        model = other.eval()
    return model


def seeded_models(rng, config, implementation):
    """transformers' "sdpa" model and `implementation`'s, with the same weights drawn from a seed of
    rng's (printed)."""
    seed = int(rng.integers(2**31))
    print(f"model seed {seed}")
    return build(config, "sdpa", seed), build(config, implementation, seed)


def exact_forward(rng):
    """The exact policy's attention function and an eval-mode module to call it with, torch's
    generator seeded from rng."""
    torch.manual_seed(int(rng.integers(2**31)))
    return pasa_hf.make_attention_forward("exact"), torch.nn.Module().eval()


@pytest.fixture(scope="module", autouse=True)
def registered():
    return pasa_hf.register()


def test_register_names_every_preset(registered):
    assert registered[0] == "pasa" and set(pasa_hf.attention_names().values()) == set(
        pasa.Policy.presets())
    assert {"pasa_sage8", "pasa_pasa", "pasa_fdpp"} <= set(registered)
    assert "pasa_sage8" in transformers.AttentionInterface().valid_keys()
    # Names of one's own come on top of the presets' (they replaced them: "pasa" was then unknown).
    mine = pasa_hf.register(policies={"mine": "fa16,s2=64"})
    assert set(registered) < set(mine) and "mine" in mine
    assert {"pasa", "mine"} <= set(transformers.AttentionInterface().valid_keys())
    # transformers' own names are refused, and stay transformers' (they were replaced process-wide).
    sdpa_before = transformers.AttentionInterface._global_mapping["sdpa"]
    for name in ("sdpa", "eager", "flash_attention_2"):
        with pytest.raises(pasa.PasaError, match=rf"^policies: '{name}' is one of transformers' own"):
            pasa_hf.register(policies={name: "sage8"})
    assert transformers.AttentionInterface._global_mapping["sdpa"] is sdpa_before
    assert pasa_hf.register(policies={"mine": "exact"}) == mine  # (pasa's own names again: fine)


@pytest.mark.parametrize("make_config", [llama_config, qwen2_config], ids=["llama", "qwen2"])
def test_logits_and_generation_match_sdpa(rng, make_config):
    config = make_config()
    reference, model = seeded_models(rng, config, "pasa")
    ids = torch.from_numpy(rng.integers(0, config.vocab_size, (2, 12)))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding of the second prompt
    pasa.stats(reset=True)
    with torch.no_grad():
        want = reference(input_ids=ids, attention_mask=mask).logits
        got = model(input_ids=ids, attention_mask=mask).logits
    counts = pasa.stats()
    assert counts["calls"] == config.num_hidden_layers and counts["fallbacks"] == 0, counts
    scale = want.abs().max()
    assert (got - want).abs().max() <= EXACT_TOLERANCE * scale
    with torch.no_grad():
        want_tokens = reference.generate(input_ids=ids, attention_mask=mask, max_new_tokens=32,
                                         do_sample=False, pad_token_id=0)
        got_tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=32,
                                    do_sample=False, pad_token_id=0)
    assert torch.equal(got_tokens, want_tokens)
    assert pasa.stats()["fallbacks"] == 0


def test_a_mask_that_keeps_every_key_is_left_out(rng):
    # A tokenizer's all-ones attention_mask hides nothing: as "sdpa" does, the mask function leaves it
    # out (on the GPU a mask sends pasa's and sage8's mask-less kernels to torch); a padded batch
    # still gets its mask. An output_attentions request is warned about (pasa forms no weights).
    seen = []
    forward = pasa_hf.make_attention_forward("exact")

    def spy(module, q, k, v, attention_mask, **kwargs):
        seen.append(attention_mask is None)
        return forward(module, q, k, v, attention_mask, **kwargs)

    transformers.AttentionInterface.register("pasa_mask_spy", spy)
    transformers.AttentionMaskInterface.register("pasa_mask_spy", pasa_hf._causal_or_sdpa_mask)
    config = llama_config()
    reference, model = seeded_models(rng, config, "pasa_mask_spy")
    ids = torch.from_numpy(rng.integers(0, config.vocab_size, (2, 12)))
    with torch.no_grad():
        want = reference(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        got = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        assert seen == [True] * config.num_hidden_layers
        assert (got - want).abs().max() <= EXACT_TOLERANCE * want.abs().max()
        padded = torch.ones_like(ids)
        padded[1, :3] = 0
        seen.clear()
        model(input_ids=ids, attention_mask=padded)
        assert seen == [False] * config.num_hidden_layers
        pasa_hf._warned_no_attention_weights = False
        with pytest.warns(UserWarning, match="does not return attention weights"):
            model(input_ids=ids, output_attentions=True)


def test_a_policy_whose_gpu_kernels_take_no_mask_falls_back_before_running(monkeypatch):
    # The precheck reads the answer recorded where the policy was chosen (native code, which
    # torch.compile cannot trace); here one is recorded by hand for a stand-in CUDA query.
    from pasa import _fallback

    class Query:
        is_cuda, dtype = True, torch.float16

    monkeypatch.setattr(_fallback, "_gpu_score_mods", {("sage8", torch.float16): False})
    assert _fallback.score_mods_refusal("sage8", Query(), "attn_mask").startswith(
        "attn_mask: the GPU kernels of policy 'sage8' take no attention mask")
    assert _fallback.score_mods_refusal("sage8", Query(), None) is None
    assert _fallback.score_mods_refusal("pasa", Query(), "softcap") is None  # (not recorded: planning decides)


def test_static_cache_prefill_and_generation_match_sdpa(rng):
    # A prefill into an empty static cache has keys as long as the cache, the empty slots past the
    # prompt: pasa's mask function gives it sdpa's mask (sdpa itself gives none there and relies on
    # torch's top-left is_causal); bottom-right over the whole cache was wrong from the first token.
    config = llama_config()
    reference, model = seeded_models(rng, config, "pasa")
    ids = torch.from_numpy(rng.integers(1, config.vocab_size, (1, 6)))
    pasa.stats(reset=True)
    with torch.no_grad():
        want, got = (m.generate(input_ids=ids, max_new_tokens=10, do_sample=False,
                                cache_implementation="static", pad_token_id=0, output_scores=True,
                                return_dict_in_generate=True) for m in (reference, model))
    assert pasa.stats()["calls"] > 0 and pasa.stats()["fallbacks"] == 0, pasa.stats()
    first = want.scores[0]  # the prefill's logits of the last prompt token
    assert (got.scores[0] - first).abs().max() <= EXACT_TOLERANCE * first.abs().max()
    assert torch.equal(got.sequences, want.sequences)


def test_position_bias_reaches_pasa(rng):
    # T5's relative position bias comes as position_bias: added to the scores as transformers' sdpa
    # adds it (it was dropped: logits off by 0.17).
    seed = int(rng.integers(2**31))
    print(f"model seed {seed}")
    config = transformers.T5Config(vocab_size=97, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                                   num_decoder_layers=1, num_heads=4, decoder_start_token_id=0)
    models = []
    for implementation in ("sdpa", "pasa"):
        torch.manual_seed(seed)
        models.append(transformers.T5ForConditionalGeneration._from_config(
            copy.deepcopy(config), attn_implementation=implementation).eval())
    ids = torch.from_numpy(rng.integers(1, config.vocab_size, (2, 9)))
    labels = torch.from_numpy(rng.integers(1, config.vocab_size, (2, 7)))
    pasa.stats(reset=True)
    with torch.no_grad():
        want, got = (m(input_ids=ids, labels=labels).logits for m in models)
    assert pasa.stats()["calls"] == 3 and pasa.stats()["fallbacks"] == 0, pasa.stats()
    assert (got - want).abs().max() <= EXACT_TOLERANCE * want.abs().max()


def test_no_mask_means_causal_over_the_last_queries_and_a_bias_may_broadcast(rng):
    # pasa's mask function gives no mask only where the alignments agree, so more keys than queries
    # without one come from a model that cut its queries to the last tokens (Gemma 4's KV-shared
    # layers): bottom-right; fewer keys: torch's top-left. A position bias broadcast over the queries
    # ([1, H, 1, S_kv], ALiBi-style) is masked causally all the same.
    forward, module = exact_forward(rng)
    for s_q, s_kv in ((7, 5), (5, 5), (4, 9)):
        q, k, v = torch.randn(1, 4, s_q, 8), torch.randn(1, 2, s_kv, 8), torch.randn(1, 2, s_kv, 8)
        bias = torch.randn(1, 4, 1, s_kv)
        for position_bias in (None, bias):
            got, _ = forward(module, q, k, v, None, is_causal=True, position_bias=position_bias)
            kk, vv = (t.repeat_interleave(2, dim=1).double() for t in (k, v))
            scores = q.double() @ kk.transpose(-1, -2) / 8**0.5
            if position_bias is not None:
                scores = scores + position_bias.double()
            keep = torch.arange(s_q)[:, None] + max(s_kv - s_q, 0) >= torch.arange(s_kv)[None, :]
            want = (torch.softmax(scores.masked_fill(~keep, float("-inf")), -1) @ vv).transpose(1, 2)
            torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)


def test_a_sparse_key_selection_is_applied_and_block_indices_are_refused(rng):
    # DeepSeek-V3.2 and its kin pass the indexer's top-k keys as indices= to every backend but eager
    # and sdpa (which get them as a mask): pasa ran dense attention (logits off by 0.2).
    forward, module = exact_forward(rng)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    indices = torch.stack([torch.randperm(6)[:3] for _ in range(2 * 6)]).reshape(2, 6, 3).to(torch.int32)
    chosen = torch.zeros(2, 1, 6, 6, dtype=torch.bool).scatter(-1, indices.long().unsqueeze(1), True)
    indices = torch.cat([indices, torch.full((2, 6, 1), -1, dtype=torch.int32)], dim=-1)  # (-1: no key)
    causal = torch.arange(6)[:, None] >= torch.arange(6)[None, :]
    kk, vv = (t.repeat_interleave(2, dim=1).double() for t in (k, v))
    scores = q.double() @ kk.transpose(-1, -2) / 8**0.5
    for mask in (None, causal.expand(2, 1, 6, 6)):
        got, _ = forward(module, q, k, v, mask, is_causal=True, indices=indices)
        keep = chosen & causal
        weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)
        want = (weights @ vv).transpose(1, 2)
        torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)
    with pytest.raises(pasa.PasaError, match=r"^block_indices: this model's block-sparse key selection"):
        forward(module, q, k, v, None, block_indices=torch.zeros(2, 2, 6, 1, dtype=torch.int64))


def test_gemma4_kv_shared_layers_match_sdpa(rng):
    # Gemma 4 cuts the queries of its KV-shared layers to the kept logits for every backend but sdpa
    # where the masks are None: pasa's mask function gave None for a static prefill (sdpa's skip) and
    # pasa read the cut queries top-left (logits off by 0.08-0.36).
    gemma4 = pytest.importorskip("transformers.models.gemma4", reason="this transformers has no Gemma 4")
    config = gemma4.Gemma4TextConfig(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
        vocab_size_per_layer_input=97, hidden_size_per_layer_input=8, max_position_embeddings=128,
        pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(int(rng.integers(2**31)))
    weights = gemma4.Gemma4ForCausalLM(copy.deepcopy(config)).state_dict()
    ids = torch.from_numpy(rng.integers(3, 97, (2, 9)))
    results = {}
    for implementation in ("sdpa", "pasa"):
        model = gemma4.Gemma4ForCausalLM._from_config(copy.deepcopy(config),
                                                      attn_implementation=implementation).eval()
        model.load_state_dict(weights)
        with torch.no_grad():
            generated = model.generate(input_ids=ids, max_new_tokens=2, do_sample=False,
                                       cache_implementation="static", output_scores=True,
                                       return_dict_in_generate=True)
            kept = model(input_ids=ids, logits_to_keep=3,
                         past_key_values=transformers.DynamicCache(config=model.config)).logits
        # (the prefill's scores, which the cut queries decide, and the kept logits; later steps follow
        # the tokens, which a near tie of random weights could split)
        results[implementation] = (generated.scores[0], kept)
    for want, got in zip(results["sdpa"], results["pasa"]):
        assert (got - want).abs().max() <= EXACT_TOLERANCE * want.abs().max()


def gpt_oss_config():
    return transformers.GptOssConfig(
        vocab_size=97, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=128, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"])


def test_attention_sinks_match_eager(rng):
    # GPT-OSS passes its per-head sink logits as s_aux: each row's softmax sums them too (they were
    # dropped: logits off by 0.5).
    if not hasattr(transformers, "GptOssConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no GPT-OSS")
    seed = int(rng.integers(2**31))
    print(f"model seed {seed}")
    config = gpt_oss_config()
    models = []
    for implementation in ("eager", "pasa"):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                              attn_implementation=implementation)
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.normal_(0.0, 2.0)
        models.append(model.eval())
    ids = torch.from_numpy(rng.integers(1, config.vocab_size, (2, 12)))
    pasa.stats(reset=True)
    with torch.no_grad():
        want, got = (m(input_ids=ids).logits for m in models)
        want_tokens, got_tokens = (m.generate(input_ids=ids, max_new_tokens=8, do_sample=False,
                                              pad_token_id=0) for m in models)
    assert pasa.stats()["calls"] > 0 and pasa.stats()["fallbacks"] == 0, pasa.stats()
    assert (got - want).abs().max() <= EXACT_TOLERANCE * want.abs().max()
    assert torch.equal(got_tokens, want_tokens)


def test_sinks_on_pasa_and_on_its_fallback(rng):
    forward, module = exact_forward(rng)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    mask[1, ..., 0, :] = False  # a row that sees no key: O = 0, the sink takes all its weight
    kk, vv = (t.repeat_interleave(2, dim=1).double() for t in (k, v))
    for sink in (torch.randn(4) * 2, torch.randn(2, 4, 5, 1) * 2):
        scores = (q.double() @ kk.transpose(-1, -2) * 0.5).masked_fill(~mask, float("-inf"))
        column = (sink.double().reshape(1, 4, 1, 1) if sink.dim() == 1 else sink.double()).expand(2, 4, 5, 1)
        want = (torch.softmax(torch.cat([scores, column], -1), -1)[..., :-1] @ vv).transpose(1, 2)
        got, _ = forward(module, q, k, v, mask, scaling=0.5, s_aux=sink if sink.dim() == 1 else None,
                         sinks=sink if sink.dim() == 4 else None)
        torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)
        pasa.stats(reset=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pasa.PasaFallbackWarning)
            fallback, _ = forward(module, q.double(), k.double(), v.double(), mask, scaling=0.5,
                                  s_aux=sink if sink.dim() == 1 else None,
                                  sinks=sink if sink.dim() == 4 else None)
        assert pasa.stats()["fallbacks"] == 1
        # (the fallback's softmax runs in float32, as it does without a sink)
        torch.testing.assert_close(fallback, want, atol=1e-6, rtol=1e-6)
    with pytest.raises(pasa.PasaError, match="attention sinks of shape"):
        forward(module, q, k, v, mask, s_aux=torch.zeros(4, 5))


def test_a_low_precision_policy_runs_and_differs(rng):
    config = llama_config()
    reference, model = seeded_models(rng, config, "pasa_fa16")
    ids = torch.from_numpy(rng.integers(0, config.vocab_size, (1, 16)))
    with torch.no_grad():
        want, got = reference(input_ids=ids).logits, model(input_ids=ids).logits
    err = (got - want).abs().max() / want.abs().max()
    # fa16 rounds S, P and O to fp16: far more than exact's float32 error (about 1e-7 here; EXACT_TOLERANCE
    # bounds it, and fa16's error fell below that bound on 2 of 40 draws), within fp16's roundoff scale.
    assert 2.0**-16 < err < 2.0**-11 * 64


def test_softcap_and_window_reach_pasa(rng):
    seed = int(rng.integers(2**31))
    print(f"seed {seed}")
    torch.manual_seed(seed)
    forward = pasa_hf.make_attention_forward("exact")
    q, k, v = torch.randn(1, 4, 9, 16), torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 16)
    module = torch.nn.Module().eval()
    got, _ = forward(module, q, k, v, None, scaling=0.25, softcap=2.0, sliding_window=4)
    assert got.shape == (1, 9, 4, 16)
    kk, vv = (t.repeat_interleave(2, dim=1) for t in (k, v))
    scores = 2.0 * torch.tanh(q @ kk.transpose(-1, -2) * 0.25 / 2.0)
    rows, cols = torch.arange(9)[:, None], torch.arange(9)[None, :]
    scores = scores.masked_fill(~((cols <= rows) & (cols > rows - 4)), float("-inf"))
    want = (torch.softmax(scores, -1) @ vv).transpose(1, 2)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # Dropout while training goes to torch (counted, warned once), or raises with strict=True.
    module.train()
    pasa.stats(reset=True)
    with pytest.warns(pasa.PasaFallbackWarning, match="dropout"):
        fallback, _ = forward(module, q, k, v, None, dropout=0.5, scaling=0.25, softcap=2.0,
                              sliding_window=4)
    assert pasa.stats()["reasons"] == {"dropout_p": 1}
    strict = pasa_hf.make_attention_forward("exact", strict=True)
    with pytest.raises(pasa.PasaError, match="dropout"):
        strict(module, q, k, v, None, dropout=0.5)
    for bad in ("False", 1):
        with pytest.raises(pasa.PasaError, match=rf"^strict: expected True or False, got {bad!r}"):
            pasa_hf.make_attention_forward("exact", strict=bad)
        with pytest.raises(pasa.PasaError, match=rf"^strict: expected True or False, got {bad!r}"):
            pasa_hf.register(strict=bad)


def test_a_window_without_a_mask_ends_at_the_last_key_for_any_query_count(rng):
    """A causal call without a mask and with fewer queries than keys is the end of a longer sequence:
    its window sits on the last keys. One query ran top-left aligned, seeing the first w keys."""
    torch.manual_seed(int(rng.integers(2**31)))
    forward = pasa_hf.make_attention_forward("exact")
    module = torch.nn.Module().eval()
    module.is_causal = True
    k, v = torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8)
    for s_q in (1, 2, 3):
        q = torch.randn(1, 2, s_q, 8)
        rows, cols = torch.arange(s_q)[:, None] + 10 - s_q, torch.arange(10)[None, :]
        scores = (q @ k.transpose(-1, -2) * 8**-0.5).masked_fill(~((cols <= rows) & (cols > rows - 4)), float("-inf"))
        want = (torch.softmax(scores, -1) @ v).transpose(1, 2)
        got, _ = forward(module, q, k, v, None, sliding_window=4)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=f"{s_q} queries")
        pasa.stats(reset=True)
        with pytest.warns(pasa.PasaFallbackWarning):  # the torch fallback places it alike
            fallback, _ = forward(module, q.double(), k.double(), v.double(), None, sliding_window=4)
        torch.testing.assert_close(fallback, want.double(), atol=1e-5, rtol=1e-5, msg=f"{s_q} queries")


def test_softcap_fallback_gives_fully_masked_rows_zero(rng):
    # A left-padded row masks every key. pasa gives it 0; the fallback (float64 here) gave NaN, which
    # the next layers spread to every row (a softcapped model's loss was NaN).
    forward, module = exact_forward(rng)
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool).tril()
    mask[..., 0, :] = False
    got, _ = forward(module, q, k, v, mask, softcap=2.0)
    pasa.stats(reset=True)
    with pytest.warns(pasa.PasaFallbackWarning):
        fallback, _ = forward(module, q.double(), k.double(), v.double(), mask, softcap=2.0)
    assert (fallback[:, 0] == 0).all() and (got[:, 0] == 0).all()
    torch.testing.assert_close(fallback.float(), got, atol=1e-5, rtol=1e-5)


def gpu_config():
    # Head dim 64 and fp16: what the GPU kernels run (exact prefill, split-KV decode).
    return transformers.LlamaConfig(
        vocab_size=97, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


@pytest.mark.skipif(not (torch.cuda.is_available() and pasa.built_with_cuda),
                    reason="no CUDA device, or a pasa build without the CUDA kernels")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gpu_logits_and_generation_match_sdpa(rng, compiled):
    seed = int(rng.integers(2**31))
    print(f"model seed {seed}")
    config = gpu_config()
    reference = build(config, "sdpa", seed).to("cuda", torch.float16)
    model = build(config, "pasa", seed).to("cuda", torch.float16)
    # No token equals pad_token_id (0): generate() would turn it into a padding mask, which the
    # split-KV decode kernel does not have (such decode steps run on the prefill kernel).
    ids = torch.from_numpy(rng.integers(1, config.vocab_size, (2, 40))).cuda()
    pasa.stats(reset=True)
    forward = torch.compile(model) if compiled else model
    with torch.no_grad():
        want = reference(input_ids=ids).logits.float()
        got = forward(input_ids=ids).logits.float()
    assert pasa.stats()["fallbacks"] == 0, pasa.stats()
    # fp16 activations: both round at fp16 (unit roundoff 2^-11) with fp32 accumulation; a growth
    # of 2^6 through two layers, relative to the logits' scale.
    assert (got - want).abs().max() <= 2.0**-11 * 2**6 * want.abs().max()
    with torch.no_grad():
        want = reference.generate(input_ids=ids, max_new_tokens=32, do_sample=False, pad_token_id=0,
                                  output_scores=True, return_dict_in_generate=True)
        got_tokens = model.generate(input_ids=ids, max_new_tokens=32, do_sample=False,
                                    pad_token_id=0)
    assert pasa.stats()["fallbacks"] == 0, pasa.stats()
    # The same tokens, except after a step where the reference's top two logits are closer than the
    # logits' tolerance above (random weights produce such near-ties; no two fp16 implementations
    # break them alike). From such a step on, the sequences may differ.
    start = ids.shape[1]
    for b in range(ids.shape[0]):
        differ = (got_tokens[b, start:] != want.sequences[b, start:]).nonzero()
        if differ.numel() == 0:
            continue
        step = int(differ[0])
        scores = want.scores[step][b].float()
        margin = scores[want.sequences[b, start + step]] - scores[got_tokens[b, start + step]]
        tolerance = 2.0**-11 * 2**6 * scores.abs().max()
        assert margin <= tolerance, (b, step, float(margin), float(tolerance))


@pytest.mark.skipif(not (torch.cuda.is_available() and pasa.built_with_cuda),
                    reason="no CUDA device, or a pasa build without the CUDA kernels")
def test_gpu_masked_calls_of_a_mask_less_policy_fall_back_also_compiled(rng):
    # sage8's GPU kernels take no mask: a padded batch's masked calls fall back to torch, also under
    # torch.compile, where the refusal, found when the graph ran, raised instead.
    seed = int(rng.integers(2**31))
    print(f"model seed {seed}")
    config = gpu_config()
    reference = build(config, "sdpa", seed).to("cuda", torch.float16)
    model = torch.compile(build(config, "pasa_sage8", seed).to("cuda", torch.float16))
    ids = torch.from_numpy(rng.integers(1, config.vocab_size, (2, 40))).cuda()
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    pasa.stats(reset=True)
    with torch.no_grad():
        want = reference(input_ids=ids, attention_mask=mask).logits.float()
        got = model(input_ids=ids, attention_mask=mask).logits.float()
    assert (got - want).abs().max() <= 2.0**-11 * 2**6 * want.abs().max()  # (torch ran them)
