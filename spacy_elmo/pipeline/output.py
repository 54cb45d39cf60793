"""`doc._.elmo`: the per-token ELMo vectors of one Doc, stored msgpack-friendly."""

from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy
from spacy.tokens import Doc


@dataclass
class ElmoOutput:
    """ELMo vectors of one Doc; row i is token i, whitespace tokens are zero rows."""

    mixed: numpy.ndarray
    """(n_tokens, 2P) float32: the component's layer mix."""
    layers: Optional[numpy.ndarray] = None
    """(n_layers + 1, n_tokens, 2P) float32, or None when the component does not keep layers."""
    offsets: Optional[numpy.ndarray] = None
    """(n_tokens, 2) int64: each token's start and end character, as the component saw them
    (None in vectors stored before they were kept)."""

    def to_dict(self) -> Dict[str, Any]:
        """Plain arrays in a dict: what `doc.user_data` stores and msgpack serializes."""
        return {"mixed": self.mixed, "layers": self.layers, "offsets": self.offsets}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ElmoOutput":
        offsets = data.get("offsets")
        return cls(mixed=numpy.asarray(data["mixed"]), layers=data.get("layers"), offsets=None if offsets is None else numpy.asarray(offsets))


def token_offsets(doc: Doc) -> numpy.ndarray:
    """(n_tokens, 2) int64: each token's start and end character in `doc.text`."""
    offsets = numpy.fromiter((edge for token in doc for edge in (token.idx, token.idx + len(token))), dtype=numpy.int64, count=2 * len(doc))
    return offsets.reshape(len(doc), 2)
