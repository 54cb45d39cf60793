"""`doc._.elmo`: the per-token ELMo vectors of one Doc, stored msgpack-friendly."""

from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy


@dataclass
class ElmoOutput:
    """ELMo vectors of one Doc; row i is token i, whitespace tokens are zero rows."""

    mixed: numpy.ndarray
    """(n_tokens, 2P) float32: the component's layer mix."""
    layers: Optional[numpy.ndarray] = None
    """(n_layers + 1, n_tokens, 2P) float32, or None when the component does not keep layers."""

    def to_dict(self) -> Dict[str, Any]:
        """Plain arrays in a dict: what `doc.user_data` stores and msgpack serializes."""
        return {"mixed": self.mixed, "layers": self.layers}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ElmoOutput":
        return cls(mixed=numpy.asarray(data["mixed"]), layers=data.get("layers"))
