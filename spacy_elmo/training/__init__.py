"""biLM pretraining: corpus preparation, config, batches, the trainer, checkpoints, perplexity."""

from .corpus import CorpusStats, prepare_corpus

__all__ = ["CorpusStats", "prepare_corpus"]
