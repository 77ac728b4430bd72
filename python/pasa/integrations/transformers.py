# SPDX-License-Identifier: Apache-2.0
"""pasa as a Hugging Face transformers attention backend.

``register()`` adds pasa to transformers' ``AttentionInterface`` (and the matching mask interface),
so a model loads with ``attn_implementation="pasa"``::

    import pasa.integrations.transformers as pasa_hf
    pasa_hf.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="pasa")

Names: ``"pasa"`` runs the ``exact`` policy (pasa's default everywhere); ``"pasa_<preset>"`` runs a
preset (``"pasa_pasa"``, ``"pasa_sage8"``, ``"pasa_fa16"``, ...); ``register(policies={name:
policy})`` adds names of your own. The backend takes what transformers passes: causal attention
(a KV cache's comes as a mask, as does a prefill into an empty static cache; no mask with more keys
than queries means queries cut to the last tokens, bottom-right), grouped-query heads (no repeat),
sliding windows and padding masks (as the boolean or float mask transformers builds), logit
softcaps, the scaling, position biases (T5's, added to the mask as transformers' sdpa adds them),
attention sinks (GPT-OSS's ``s_aux``, one logit a head, or ``sinks`` [B, H_q, S_q, 1]: each row's O
scaled by its keys' share of the softmax, from the LSE) and a sparse indexer's ``indices``. What
pasa cannot run (dropout while training, autograd, a head dim the GPU kernels lack, a policy without a
GPU kernel or without the window, softcap or mask the call needs, ...) goes to torch with a warning once per reason and is counted in
``pasa.stats()``; ``register(strict=True)`` raises instead.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .._api import attention
from .._capture import unrouted_sdpa
from .._errors import PasaError, flag_argument
from .._fallback import run_or_fallback, score_mods_refusal, sdpa_precheck, warm_score_mods
from .._policy import Policy, PolicyLike

__all__ = ["register", "attention_names"]


def attention_names() -> Dict[str, str]:
    """The names :func:`register` adds by default, and the policy each runs."""
    names = {"pasa": "exact"}
    names.update({f"pasa_{preset}": preset for preset in Policy.presets()})
    return names


_registered: set = set()  # the names register() gave transformers in this process


def register(policies: Optional[Mapping[str, PolicyLike]] = None, *,
             strict: bool = False) -> List[str]:
    """Registers pasa's attention under the names of :func:`attention_names` and those of
    ``policies``, a mapping ``{name: policy}`` (which takes precedence for a name in both), with
    transformers; returns the names."""
    import transformers

    table: Dict[str, PolicyLike] = dict(attention_names())
    table.update({str(k): v for k, v in (policies or {}).items()})
    # A name transformers already has ("sdpa", "eager", "flash_attention_2", ...) would be replaced for
    # every model in the process, with no way back: refused (a name pasa registered before is pasa's).
    builtin = set(getattr(transformers.AttentionInterface, "_global_mapping", {})) | {"eager"}
    taken = sorted(name for name in table if name in builtin - _registered)
    if taken:
        raise PasaError(f"policies: {taken[0]!r} is one of transformers' own attention implementations, "
                        f"which registering would replace for every model; give pasa a name of its own "
                        f"(e.g. 'pasa_{taken[0]}')")
    for name, policy in table.items():
        transformers.AttentionInterface.register(name, make_attention_forward(policy, strict=strict))
        _register_mask(transformers, name)
        _registered.add(name)
    return list(table)


def _register_mask(transformers: Any, name: str) -> None:
    """Builds ``name``'s masks: none where causal alone says it all whatever the alignment (also
    while the model is traced, where "sdpa" materializes one, if no padding mask is given), else
    sdpa's boolean mask (padding, sliding windows, a prefill into an empty static cache)."""
    interface = getattr(transformers, "AttentionMaskInterface", None)
    if interface is None:  # older transformers build masks without asking the implementation
        return
    interface.register(name, _causal_or_sdpa_mask)


def _causal_or_sdpa_mask(*args: Any, **kwargs: Any) -> Optional[Any]:
    """None (pasa's causal says it all) when the mask would be the causal one alone: the causal mask
    function, no padding mask or one that keeps every key, no window, no key offset, and one query or
    as many queries as keys, where the two alignments agree. Without a padding mask the test reads
    only sizes, so it also holds while tracing, where sdpa's own skip gives up; a padding mask's values
    are read outside tracing only (_hides_nothing). Else transformers' sdpa mask, made whole: sdpa's other skip (a prefill
    into an empty static cache, more keys than queries) relies on torch's top-left is_causal, and a
    model may cut the queries of a mask-less call to its last tokens (Gemma 4's KV-shared layers do,
    for every backend but sdpa), which needs the bottom-right one. (The arguments are read by name:
    transformers 4.x passes ``cache_position``, 5.x ``q_length`` and ``q_offset``.)"""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    bound = _sdpa_mask_signature().bind_partial(*args, **kwargs)
    given = bound.arguments
    q_length = given.get("q_length")
    if q_length is None and given.get("cache_position") is not None:
        q_length = given["cache_position"].shape[0]
    kv_length = given.get("kv_length")
    if (given.get("allow_is_causal_skip", True) and given.get("mask_function", causal_mask_function) is causal_mask_function
            and _hides_nothing(given.get("attention_mask"), kv_length) and given.get("local_size") is None
            and given.get("kv_offset", 0) == 0 and q_length is not None
            and (q_length == 1 or q_length == kv_length)):
        return None
    bound.arguments["allow_is_causal_skip"] = False
    return sdpa_mask(*bound.args, **bound.kwargs)


def _hides_nothing(padding_mask: Optional[Any], kv_length: Any) -> bool:
    """No padding mask, or a 2-D one of the keys' length that keeps every key (what a tokenizer
    returns for unpadded text), read only outside tracing (its values would be guarded on) as sdpa's
    own skip does: a mask built from it would send the GPU's mask-less kernels (pasa, sage8) to torch."""
    if padding_mask is None:
        return True
    import torch

    from .._torch import _untraced

    return (type(padding_mask) is torch.Tensor and padding_mask.dim() == 2 and padding_mask.shape[-1] == kv_length
            and _untraced() and bool(padding_mask.all()))


_sdpa_mask_signature_cached: Optional[inspect.Signature] = None


def _sdpa_mask_signature() -> inspect.Signature:
    """sdpa_mask's signature, taken once. (A module variable, not functools.lru_cache: torch.compile
    warns of "silent incorrectness" for every lru_cache-wrapped function it traces through.)"""
    global _sdpa_mask_signature_cached
    if _sdpa_mask_signature_cached is None:
        from transformers.masking_utils import sdpa_mask

        _sdpa_mask_signature_cached = inspect.signature(sdpa_mask)
    return _sdpa_mask_signature_cached


def make_attention_forward(policy: PolicyLike, *, strict: bool = False) -> Callable[..., Any]:
    """An attention function with transformers' signature that runs ``policy``."""
    strict = flag_argument(strict, "strict")
    policy_text = str(Policy(policy))
    warm_score_mods(policy_text)

    def pasa_attention_forward(module: Any, query: Any, key: Any, value: Any,
                               attention_mask: Optional[Any], dropout: float = 0.0,
                               scaling: Optional[float] = None, is_causal: Optional[bool] = None,
                               sliding_window: Optional[int] = None,
                               softcap: Optional[float] = None, position_bias: Optional[Any] = None,
                               s_aux: Optional[Any] = None, sinks: Optional[Any] = None,
                               indices: Optional[Any] = None, block_indices: Optional[Any] = None,
                               **kwargs: Any) -> Tuple[Any, None]:
        # query [B, H_q, S_q, D], key/value [B, H_kv, S_kv, D]; returns ([B, S_q, H_q, D], None).
        import torch

        if kwargs.get("output_attentions", False):
            _warn_no_attention_weights()
        s_q, s_kv = query.shape[2], key.shape[2]
        mask = attention_mask
        if mask is not None and mask.dim() == 4 and mask.shape[-1] > s_kv:
            mask = mask[:, :, :, :s_kv]
        if is_causal is None:
            is_causal = getattr(module, "is_causal", True)
        # With a mask, the mask says everything (causal, window, padding); else causal and window.
        # pasa's mask function (above) gives no mask for one query or as many queries as keys, where
        # the alignments agree; more keys than queries without a mask then come from a model that cut
        # the queries to its last tokens: bottom-right aligned (fewer keys: torch's top-left). One query
        # sees every key under either alignment and runs without causal, but its diagonal, where a
        # sliding window ends, is still the last key.
        causal = bool(is_causal) and mask is None and s_q > 1
        offset = s_kv - s_q if bool(is_causal) and mask is None and s_kv > s_q else 0
        if block_indices is not None:  # (no backend but eager and sdpa gets it as a mask)
            raise PasaError("block_indices: this model's block-sparse key selection reaches pasa as indices, "
                            "which pasa cannot apply; load it with attn_implementation=\"sdpa\" (which "
                            "gets the selection as a mask)")
        if indices is not None:  # (DeepSeek-V3.2's sparse selection and its kin, as their eager path masks)
            mask = _with_key_indices(indices, mask, causal, offset, s_q, s_kv)
            causal = False
        if position_bias is not None:  # (T5's relative bias and its kin: added to the scores)
            mask = _with_position_bias(position_bias[..., :s_kv], mask, causal, offset, s_q, s_kv)
            causal = False
        sink = _sink_logits(s_aux if s_aux is not None else sinks)
        window = None
        if mask is None and sliding_window is not None:
            window = (int(sliding_window) - 1, -1 if causal else int(sliding_window) - 1)
        cap = float(softcap) if softcap else None
        if not getattr(module, "training", False):
            dropout = 0.0

        def run() -> Any:
            result = attention(query, key, value, policy=policy_text, causal=causal,
                               causal_alignment="bottom_right" if offset else "top_left",
                               scale=scaling, window_size=window, softcap=cap, attn_mask=mask,
                               return_lse=sink is not None)
            return result if sink is None else _without_sink_share(*result, sink)

        def fallback() -> Any:
            return _torch_attention(query, key, value, mask, causal, offset, window, cap, scaling,
                                    dropout, sink)

        precheck = sdpa_precheck(query, key, value, mask, dropout, True, scaling)
        if precheck is None:
            given = "attn_mask" if mask is not None else "window_size" if window else "softcap" if cap else None
            precheck = score_mods_refusal(policy_text, query, given)
        if precheck is None and sink is not None and sink.requires_grad and torch.is_grad_enabled():
            precheck = "autograd: pasa has no backward"
        out = run_or_fallback(run, fallback, precheck, strict)
        return out.transpose(1, 2).contiguous(), None

    pasa_attention_forward.__name__ = f"pasa_attention_forward[{policy_text}]"
    return pasa_attention_forward


_warned_no_attention_weights = False


def _warn_no_attention_weights() -> None:
    """Once a process, as transformers' "sdpa" does: pasa never forms the attention weights, so a
    model asked for output_attentions=True returns none from its pasa layers."""
    global _warned_no_attention_weights
    if not _warned_no_attention_weights:
        _warned_no_attention_weights = True
        import warnings

        warnings.warn("pasa attention does not return attention weights: output_attentions=True gives none for "
                      "its layers (load the model with attn_implementation=\"eager\" for them)", stacklevel=3)


def _causal_keep(s_q: int, s_kv: int, offset: int, device: Any) -> Any:
    """[s_q, s_kv] booleans: query i keeps the keys up to i + offset."""
    import torch

    rows = torch.arange(s_q, device=device)[:, None] + offset
    return rows >= torch.arange(s_kv, device=device)[None, :]


def _with_key_indices(indices: Any, mask: Optional[Any], causal: bool, offset: int, s_q: int, s_kv: int) -> Any:
    """The mask of a call whose keys a sparse indexer chose (``indices`` [B, S_q, top-k] key
    positions, as DeepSeek-V3.2 passes them to every backend but eager and sdpa, which get this
    mask; a negative one chooses nothing): the given mask (or the causal one of s_q queries and s_kv
    keys, query i seeing keys up to i + offset) where a key is chosen, masked elsewhere."""
    import torch

    valid = (indices >= 0).unsqueeze(1)
    counts = torch.zeros((indices.shape[0], 1, s_q, s_kv), dtype=torch.int32, device=indices.device)
    counts.scatter_add_(-1, indices.long().clamp(min=0).unsqueeze(1), valid.to(torch.int32))
    chosen = counts > 0
    if mask is None:
        if not causal:
            return chosen
        return chosen & _causal_keep(s_q, s_kv, offset, indices.device)
    if mask.dtype == torch.bool:
        return mask & chosen
    return mask.masked_fill(~chosen, torch.finfo(mask.dtype).min)


def _with_position_bias(bias: Any, mask: Optional[Any], causal: bool, offset: int, s_q: int, s_kv: int) -> Any:
    """The additive mask of a call with a position bias (which may broadcast), as transformers' sdpa
    forms it: the bias where the boolean mask (or the causal mask of s_q queries and s_kv keys, query
    i seeing keys up to i + offset) keeps a key, the dtype's lowest value elsewhere; a float mask
    added to it."""
    import torch

    lowest = torch.finfo(bias.dtype).min
    if mask is None and causal:
        mask = _causal_keep(s_q, s_kv, offset, bias.device)
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, lowest)
    return bias + mask


def _sink_logits(sink: Optional[Any]) -> Optional[Any]:
    """An attention sink's logits (``s_aux``: one a head, [H_q], as GPT-OSS passes them; ``sinks``:
    [B, H_q, S_q, 1], one a row) as fp32 that broadcasts against the LSE [B, H_q, S_q]."""
    if sink is None:
        return None
    if sink.dim() == 1:
        return sink.float().reshape(1, -1, 1)
    if sink.dim() == 4 and sink.shape[-1] == 1:
        return sink.float()[..., 0]
    raise PasaError(f"s_aux: attention sinks of shape {tuple(sink.shape)} (pasa takes [H_q] or "
                    f"[B, H_q, S_q, 1])")


def _without_sink_share(out: Any, lse: Any, sink: Any) -> Any:
    """O of a softmax whose denominator also holds e^sink: each row's O times its keys' share of the
    sum, e^LSE / (e^LSE + e^sink) = sigmoid(LSE - sink) (0 for a row that sees no key)."""
    import torch

    share = torch.sigmoid(lse - sink)
    return (out.float() * share[..., None]).to(out.dtype)


def _torch_attention(query: Any, key: Any, value: Any, mask: Optional[Any], causal: bool, offset: int,
                     window: Optional[Tuple[int, int]], softcap: Optional[float],
                     scaling: Optional[float], dropout: float, sink: Optional[Any]) -> Any:
    """The fallback: torch's SDPA (with the causal and window limits as a boolean mask, query i's
    diagonal at key i + offset), or plain torch math when there is a softcap or a sink
    (_sink_logits), which SDPA lacks."""
    import torch

    s_q, s_kv = query.shape[2], key.shape[2]
    if causal or window is not None:
        rows = torch.arange(s_q, device=query.device)[:, None] + offset
        cols = torch.arange(s_kv, device=query.device)[None, :]
        keep = torch.ones(s_q, s_kv, dtype=torch.bool, device=query.device)
        if causal:
            keep &= cols <= rows
        if window is not None:
            if window[0] >= 0:
                keep &= cols >= rows - window[0]
            if window[1] >= 0:
                keep &= cols <= rows + window[1]
        mask = keep if mask is None else (
            mask & keep if mask.dtype == torch.bool else mask.masked_fill(~keep, -math.inf))
    groups = query.shape[1] // key.shape[1]
    if softcap is None and sink is None:
        return unrouted_sdpa()(query, key, value, attn_mask=mask, dropout_p=dropout,
                               scale=scaling, enable_gqa=groups > 1)
    key, value = (t.repeat_interleave(groups, dim=1) for t in (key, value))
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is not None:
        scores = (scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool
                  else scores + mask)
    scores = scores.float()
    if sink is not None:  # a column of the sink's logit in the softmax, dropped after it
        column = sink[..., None].expand(*scores.shape[:-1], 1)
        weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1].to(query.dtype)
    else:
        # A row whose every key is masked (left padding) is 0, as pasa's kernels and torch's SDPA
        # give it, not the NaN of a softmax over -inf, which the next layers would spread to every row.
        dead = scores.amax(dim=-1, keepdim=True) == -math.inf
        weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0).to(query.dtype)
    weights = torch.nn.functional.dropout(weights, p=dropout, training=dropout > 0)
    return torch.matmul(weights, value)
