"""The `._.elmo` extensions on Doc, Span and Token.

The arrays live in `doc._.elmo_data` (a plain dict, so `doc.to_bytes()`, `DocBin` and
multiprocessing keep them); `doc._.elmo`, `span._.elmo` and `token._.elmo` are getters.
"""

from typing import Optional

import numpy
from spacy.tokens import Doc, Span, Token

from .output import ElmoOutput, token_offsets

DATA_ATTR = "elmo_data"


def doc_elmo(doc: Doc) -> Optional[ElmoOutput]:
    """The doc's ELMo vectors, None if the elmo component has not run on it; a ValueError
    if the doc was retokenized since."""
    output = _stored(doc)
    if output is not None and output.offsets is not None and not numpy.array_equal(output.offsets, token_offsets(doc)):
        raise _retokenized("its tokens are not those doc._.elmo was computed for")
    return output


def token_elmo(token: Token) -> Optional[numpy.ndarray]:
    """(2P,) mixed vector of the token, or None if the doc has no ELMo vectors (only this
    token's row is checked against a retokenization: reading every token stays linear)."""
    output = _stored(token.doc)
    if output is None:
        return None
    if output.offsets is not None and tuple(output.offsets[token.i]) != (token.idx, token.idx + len(token)):
        raise _retokenized(f"token {token.i} ({token.text!r}) is not the one doc._.elmo row {token.i} was computed for")
    return output.mixed[token.i]


def _stored(doc: Doc) -> Optional[ElmoOutput]:
    """The stored vectors, one row per token of the doc (else a ValueError); None if none."""
    data = doc._.get(DATA_ATTR)
    if data is None:
        return None
    output = ElmoOutput.from_dict(data)
    if output.mixed.shape[0] != len(doc):
        raise _retokenized(f"doc._.elmo has {output.mixed.shape[0]} rows but the doc has {len(doc)} tokens")
    return output


def _retokenized(what: str) -> ValueError:
    return ValueError(f"{what}: the doc was retokenized after the elmo component ran; put elmo after any retokenizer")


def span_elmo(span: Span) -> Optional[numpy.ndarray]:
    """(2P,) mean mixed vector over the span's non-whitespace tokens (zeros if it has none)."""
    output = doc_elmo(span.doc)
    if output is None:
        return None
    rows = [token.i for token in span if not token.is_space]
    if not rows:
        return numpy.zeros(output.mixed.shape[1], dtype=output.mixed.dtype)
    return output.mixed[rows].mean(axis=0)


def install_extensions() -> None:
    """Register the extensions once; never overrides an existing registration."""
    if not Doc.has_extension(DATA_ATTR):
        Doc.set_extension(DATA_ATTR, default=None)
    if not Doc.has_extension("elmo"):
        Doc.set_extension("elmo", getter=doc_elmo)
    if not Span.has_extension("elmo"):
        Span.set_extension("elmo", getter=span_elmo)
    if not Token.has_extension("elmo"):
        Token.set_extension("elmo", getter=token_elmo)
