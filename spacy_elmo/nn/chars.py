"""ELMo character ids: UTF-8 bytes of a token, framed by begin/end-of-word marks.

Ids follow bilm-tf/AllenNLP: bytes 0..255, begin-of-sentence 256, end-of-sentence 257,
begin-of-word 258, end-of-word 259, padding 260, all shifted by +1 so that an all-zero
row marks a padded (absent) token.
"""

from typing import Sequence

import numpy

BEGIN_OF_SENTENCE = 256
END_OF_SENTENCE = 257
BEGIN_OF_WORD = 258
END_OF_WORD = 259
PADDING = 260
N_CHARACTER_IDS = 262
"""Rows of the character table: the 261 ids above (+1) and 0 for a padded token."""
CHARACTER_COUNTS = (261, 262)
"""What bilm-tf's options say as `n_characters`: 261 in training, 262 at inference (with
the padded token's row). Either way the table here has N_CHARACTER_IDS rows."""


def check_character_count(value: object, name: str = "n_characters") -> None:
    """ValueError naming `name` unless `value` is the integer 261 or 262."""
    if type(value) is not int or value not in CHARACTER_COUNTS:
        raise ValueError(f"{name} must be 261 or 262, got {value!r}")


MAX_CHARACTERS = 50


def _boundary_ids(character: int, width: int) -> numpy.ndarray:
    ids = numpy.full(width, PADDING, dtype=numpy.int64)
    ids[:3] = (BEGIN_OF_WORD, character, END_OF_WORD)
    return ids + 1


def begin_of_sentence_ids(width: int = MAX_CHARACTERS) -> numpy.ndarray:
    """(width,) char ids of the begin-of-sentence pseudo token."""
    return _boundary_ids(BEGIN_OF_SENTENCE, width)


def end_of_sentence_ids(width: int = MAX_CHARACTERS) -> numpy.ndarray:
    """(width,) char ids of the end-of-sentence pseudo token."""
    return _boundary_ids(END_OF_SENTENCE, width)


def token_to_char_ids(token: str, width: int = MAX_CHARACTERS) -> numpy.ndarray:
    """(width,) char ids of one token; bytes beyond `width - 2` are cut.

    Strings that are not valid UTF-8 (lone surrogates) are encoded with replacement.
    """
    encoded = token.encode("utf-8", "replace")[: width - 2]
    ids = numpy.full(width, PADDING, dtype=numpy.int64)
    ids[0] = BEGIN_OF_WORD
    ids[1 : len(encoded) + 1] = numpy.frombuffer(encoded, dtype=numpy.uint8)
    ids[len(encoded) + 1] = END_OF_WORD
    return ids + 1


def batch_to_char_ids(sentences: Sequence[Sequence[str]], width: int = MAX_CHARACTERS) -> numpy.ndarray:
    """(batch, max_len, width) char ids for tokenized sentences, 0 for padding tokens."""
    max_len = max((len(s) for s in sentences), default=0)
    out = numpy.zeros((len(sentences), max_len, width), dtype=numpy.int64)
    for row, sentence in enumerate(sentences):
        for col, token in enumerate(sentence):
            out[row, col] = token_to_char_ids(token, width)
    return out
