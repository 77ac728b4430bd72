# SPDX-License-Identifier: Apache-2.0
"""Integrations of pasa into model libraries: :mod:`pasa.integrations.transformers` (Hugging Face
transformers' ``AttentionInterface``). Each imports its library only when used."""
