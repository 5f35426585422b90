"""Invalidation contracts: safe cross-episode memory for LLM agents under server-side data drift."""

__version__ = "0.1.0"
