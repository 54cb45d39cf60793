"""Training-side tools: corpus preparation (the biLM trainer is not part of this release yet)."""
from .corpus import CorpusStats, prepare_corpus

__all__ = ["CorpusStats", "prepare_corpus"]
