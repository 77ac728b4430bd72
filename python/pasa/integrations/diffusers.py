# SPDX-License-Identifier: Apache-2.0
"""pasa as an attention processor for Hugging Face diffusers.

diffusers' ``Attention`` modules compute attention in a processor object; the default one of the
DiT, PixArt, Stable Diffusion UNet and ``Transformer2DModel`` blocks is ``AttnProcessor2_0``
(torch's SDPA). :class:`PasaAttnProcessor` computes what it computes, with pasa doing the
attention::

    import pasa.integrations.diffusers as pasa_diffusers
    pasa_diffusers.register(pipe.transformer)                   # the exact policy
    pasa_diffusers.register(pipe.transformer, policy="sage8")   # or any policy
    pasa_diffusers.unregister(pipe.transformer)                 # diffusers' own again

It takes self- and cross-attention (``encoder_hidden_states``), the attention mask diffusers
prepares (additive or boolean, per head), grouped-query heads (``Attention(kv_heads=...)``, which
``AttnProcessor2_0`` does not take) without repeating K and V, and image-shaped (4-D) inputs; Q, K
and V reach pasa in the ``[B, S, H, D]`` layout the projections produce, without transposes. What
pasa cannot run (autograd, a head dim or policy the GPU kernels lack, ...) goes to torch's SDPA with
a warning once per reason and is counted in ``pasa.stats()``; ``strict=True`` raises instead.

The processors of other models (Flux's, SD3's joint attention, Wan's, ...) call diffusers' attention
dispatcher, whose default backend calls torch's SDPA: :func:`register` leaves them as they are, and
``with pasa.patch(model):`` routes their calls through pasa.
"""

from __future__ import annotations

from typing import Any, List, Optional

from .._api import attention
from .._capture import unrouted_sdpa
from .._errors import flag_argument
from .._fallback import run_or_fallback, score_mods_refusal, sdpa_precheck, warm_score_mods
from .._policy import Policy, PolicyLike

__all__ = ["PasaAttnProcessor", "register", "unregister"]


class PasaAttnProcessor:
    """A diffusers attention processor (the call signature of ``AttnProcessor2_0``) that runs the
    attention under ``policy`` (text or :class:`pasa.Policy`; default ``"exact"``)."""

    def __init__(self, policy: PolicyLike = "exact", *, strict: bool = False) -> None:
        self.policy = str(Policy(policy))
        warm_score_mods(self.policy)
        self.strict = flag_argument(strict, "strict")

    def __repr__(self) -> str:
        return f"PasaAttnProcessor(policy={self.policy!r}, strict={self.strict})"

    def __call__(self, attn: Any, hidden_states: Any, encoder_hidden_states: Optional[Any] = None,
                 attention_mask: Optional[Any] = None, temb: Optional[Any] = None, *args: Any,
                 **kwargs: Any) -> Any:
        # (Extra arguments, such as the deprecated `scale`, are ignored as AttnProcessor2_0 ignores
        # them.)
        residual = hidden_states
        if attn.spatial_norm is not None:
            hidden_states = attn.spatial_norm(hidden_states, temb)
        image_shape = hidden_states.shape if hidden_states.ndim == 4 else None
        if image_shape is not None:  # [B, C, H, W] -> [B, H W, C]
            hidden_states = hidden_states.flatten(2).transpose(1, 2)
        keys_from = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        batch, s_kv = keys_from.shape[0], keys_from.shape[1]

        mask = None
        if attention_mask is not None:
            # diffusers' preparation ([B H, S_q or 1, S_kv]), seen as [B, H, S_q or 1, S_kv]: pasa
            # broadcasts a query axis of 1.
            mask = attn.prepare_attention_mask(attention_mask, s_kv, batch)
            mask = mask.view(batch, attn.heads, -1, mask.shape[-1])
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)

        query = attn.to_q(hidden_states)
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        elif attn.norm_cross:
            encoder_hidden_states = attn.norm_encoder_hidden_states(encoder_hidden_states)
        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)

        # [B, S, H, D] views of the projections; K and V have H_kv = their width / D heads.
        head_dim = query.shape[-1] // attn.heads
        heads_kv = key.shape[-1] // head_dim
        query = query.view(batch, -1, attn.heads, head_dim)
        key = key.view(batch, -1, heads_kv, head_dim)
        value = value.view(batch, -1, heads_kv, head_dim)
        # (norms over the head dim: the layout does not matter; older diffusers have none)
        if getattr(attn, "norm_q", None) is not None:
            query = attn.norm_q(query)
        if getattr(attn, "norm_k", None) is not None:
            key = attn.norm_k(key)
        # The default processor's scale: 1/sqrt(D) where it is AttnProcessor2_0 (scale_qk), else
        # attn.scale, as AttnProcessor applies it.
        scale = None if getattr(attn, "scale_qk", True) else attn.scale

        def run() -> Any:
            return attention(query, key, value, policy=self.policy, scale=scale, layout="bshd",
                             attn_mask=mask)

        def fallback() -> Any:
            return _torch_attention(query, key, value, mask, scale)

        precheck = sdpa_precheck(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                 mask, 0.0, True, scale)
        if precheck is None:
            precheck = score_mods_refusal(self.policy, query, "attn_mask" if mask is not None else None)
        out = run_or_fallback(run, fallback, precheck, self.strict)  # [B, S_q, H, D]

        hidden_states = out.reshape(batch, -1, attn.heads * head_dim).to(query.dtype)
        hidden_states = attn.to_out[0](hidden_states)  # projection
        hidden_states = attn.to_out[1](hidden_states)  # dropout
        if image_shape is not None:
            hidden_states = hidden_states.transpose(-1, -2).reshape(image_shape)
        if attn.residual_connection:
            hidden_states = hidden_states + residual
        return hidden_states / attn.rescale_output_factor


def _torch_attention(query: Any, key: Any, value: Any, mask: Optional[Any],
                     scale: Optional[float]) -> Any:
    """The fallback: torch's SDPA on [B, S, H, D] operands (K and V repeated for grouped heads)."""
    groups = query.shape[2] // key.shape[2]
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    if groups > 1:
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    return unrouted_sdpa()(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False,
                           scale=scale).transpose(1, 2)


def register(model: Any, policy: PolicyLike = "exact", *, strict: bool = False) -> List[str]:
    """Sets one :class:`PasaAttnProcessor` running ``policy`` on every ``Attention`` module of
    ``model`` (a diffusers model, e.g. ``pipe.transformer`` or ``pipe.unet``, or any torch module
    holding them) whose processor is diffusers' default ``AttnProcessor2_0`` or ``AttnProcessor``,
    or a PasaAttnProcessor (so that registering again switches the policy); returns those modules'
    names. Other processors are left as they are (see the module's documentation);
    :func:`unregister` undoes it."""
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0

    replaced = (AttnProcessor2_0, AttnProcessor, PasaAttnProcessor)
    processor = PasaAttnProcessor(policy, strict=strict)
    names = []
    for name, module in model.named_modules():
        current = getattr(module, "processor", None)
        if type(current) in replaced:
            if not isinstance(current, PasaAttnProcessor):
                module._pasa_replaced_processor = current  # what unregister() gives back
            module.set_processor(processor)
            names.append(name)
    return names


def unregister(model: Any) -> List[str]:
    """Gives every ``Attention`` module of ``model`` that has a :class:`PasaAttnProcessor` the
    processor :func:`register` replaced (or, for a module that came with a PasaAttnProcessor,
    diffusers' default: ``AttnProcessor2_0``, or ``AttnProcessor`` without ``scale_qk``, as
    ``Attention`` chooses); returns those modules' names."""
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0

    names = []
    for name, module in model.named_modules():
        if isinstance(getattr(module, "processor", None), PasaAttnProcessor):
            original = module.__dict__.pop("_pasa_replaced_processor", None)
            if original is None:
                original = AttnProcessor2_0() if getattr(module, "scale_qk", True) else AttnProcessor()
            module.set_processor(original)
            names.append(name)
    return names
