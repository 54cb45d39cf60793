"""Context-free token encoder of the word-level biLM: one learned vector per word.

The vocabulary is fixed when the model is made (the training corpus's `vocab.txt`) and
travels with the model. It starts with `<S>`, `</S>`, `<UNK>`: the first two encode the
sentence boundaries, the third every string outside the vocabulary, the empty string and
the literal strings "<S>" and "</S>" (so that text never looks like a boundary).
"""

from typing import Dict, Sequence, Tuple

import numpy
import torch
from torch import nn

from .special_tokens import BOS_ID, EOS_ID, SPECIAL_TOKENS, UNK_ID


def check_words(words: Sequence[str]) -> Tuple[str, ...]:
    """`words` as a tuple if it is a valid word vocabulary, else ValueError saying why."""
    words = tuple(words)
    if words[:3] != SPECIAL_TOKENS:
        raise ValueError(f"a word vocabulary must start with {SPECIAL_TOKENS}, got {words[:3]}")
    if not all(isinstance(word, str) and word for word in words):
        raise ValueError("a word vocabulary holds non-empty strings only")
    if len(set(words)) != len(words):
        raise ValueError("the word vocabulary lists a word twice")
    return words


class WordEncoder(nn.Module):
    """Word ids -> vectors of width `dim` through one embedding table (as bilm-tf's
    word-input model, whose table is as wide as the LSTM projection)."""

    def __init__(self, words: Sequence[str], dim: int) -> None:
        super().__init__()
        self.words = check_words(words)
        self.index: Dict[str, int] = {word: i for i, word in enumerate(self.words)}
        for special in SPECIAL_TOKENS[:2]:
            self.index[special] = UNK_ID
        self.embedding = nn.Embedding(len(self.words), dim)

    @property
    def embedding_weight(self) -> torch.Tensor:
        """(n_words, dim): the table; its dtype and device are the encoder's."""
        return self.embedding.weight

    def forward(self, word_ids: torch.Tensor) -> torch.Tensor:
        """(...) int64 -> (..., dim)"""
        return self.embedding(word_ids)

    def string_ids(self, strings: Sequence[str]) -> numpy.ndarray:
        """(len(strings),) int64 word ids, `<UNK>` for strings outside the vocabulary."""
        return numpy.fromiter((self.index.get(s, UNK_ID) for s in strings), dtype=numpy.int64, count=len(strings))

    def boundary_ids(self) -> numpy.ndarray:
        """(2,) the ids of <S> and </S>."""
        return numpy.array([BOS_ID, EOS_ID], dtype=numpy.int64)
