"""Contextual `vector` and `similarity` hooks: cosine on the ELMo mixed vectors.

spaCy's own `similarity` returns 1.0 for two tokens with the same text, so `vector`
hooks alone are not enough: `similarity` is hooked at doc, span and token level. Hooks
are not serialized; call `set_similarity_hooks(doc)` again after loading docs.
"""

from typing import Optional, Union, cast

import numpy
from spacy.tokens import Doc, Span, Token

from .extensions import doc_elmo, span_elmo, token_elmo

Item = Union[Doc, Span, Token]


def _required(vector: Optional[numpy.ndarray], item: Item) -> numpy.ndarray:
    if vector is None:
        raise ValueError(f"{item!r} has no ELMo vectors: run the elmo component on its doc first")
    return vector


def doc_vector(doc: Doc) -> numpy.ndarray:
    """(2P,) mean mixed vector over non-whitespace tokens."""
    return _required(span_elmo(doc[:]), doc)


def span_vector(span: Span) -> numpy.ndarray:
    return _required(span_elmo(span), span)


def token_vector(token: Token) -> numpy.ndarray:
    return _required(token_elmo(token), token)


def has_elmo_vector(item: Item) -> bool:
    return doc_elmo(item if isinstance(item, Doc) else item.doc) is not None


def elmo_or_plain_vector(item: Item) -> numpy.ndarray:
    """The item's ELMo vector where its doc has one (hooks or not), else `item.vector`."""
    doc = item if isinstance(item, Doc) else item.doc
    if doc_elmo(doc) is None:
        return cast(numpy.ndarray, item.vector)
    vector = token_elmo(item) if isinstance(item, Token) else span_elmo(item if isinstance(item, Span) else item[:])
    return cast(numpy.ndarray, vector)  # not None: the doc has ELMo vectors


def cosine(item: Item, other: Item) -> float:
    """Cosine of the two items' ELMo vectors (plain vectors for an item without ELMo);
    0.0 if either is all zeros."""
    a = numpy.asarray(elmo_or_plain_vector(item), dtype=numpy.float64)
    b = numpy.asarray(elmo_or_plain_vector(other), dtype=numpy.float64)
    if a.shape != b.shape:
        raise ValueError(f"cannot compare vectors of width {a.shape[-1]} and {b.shape[-1]}: run the same elmo component on both docs")
    norm = float(numpy.linalg.norm(a) * numpy.linalg.norm(b))
    return 0.0 if norm == 0.0 else float(a @ b / norm)


def set_similarity_hooks(doc: Doc) -> None:
    """Point doc, span and token `vector`/`has_vector`/`similarity` at ELMo."""
    doc.user_hooks.update({"vector": doc_vector, "has_vector": has_elmo_vector, "similarity": cosine})
    doc.user_span_hooks.update({"vector": span_vector, "has_vector": has_elmo_vector, "similarity": cosine})
    doc.user_token_hooks.update({"vector": token_vector, "has_vector": has_elmo_vector, "similarity": cosine})
