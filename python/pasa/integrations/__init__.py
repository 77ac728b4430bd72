# SPDX-License-Identifier: Apache-2.0
"""Integrations of pasa into model libraries: :mod:`pasa.integrations.transformers` (Hugging Face
transformers' ``AttentionInterface``) and :mod:`pasa.integrations.diffusers` (an attention processor
for diffusers' ``Attention`` modules). Each imports its library only when used."""
