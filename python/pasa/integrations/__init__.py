"""Integrations of pasa into model libraries: :mod:`pasa.integrations.transformers` (Hugging Face
transformers' ``AttentionInterface``). Each imports its library only when used."""
