"""The spaCy side: the `elmo` component, `._.elmo` extensions and similarity hooks."""

from ..io import load_bilm
from . import architectures, callbacks  # noqa: F401  (register the thinc architectures and training callbacks)
from .architectures import LearnedMix, learned_mixes
from .component import ElmoComponent, make_elmo
from .extensions import install_extensions
from .output import ElmoOutput
from .similarity import set_similarity_hooks

__all__ = ["ElmoComponent", "LearnedMix", "learned_mixes", "ElmoOutput", "install_extensions", "load_bilm", "make_elmo", "set_similarity_hooks"]
