"""The spaCy side: the `elmo` component, `._.elmo` extensions and similarity hooks."""
from . import architectures  # noqa: F401  (registers the thinc architectures)
from .component import ElmoComponent, load_bilm, make_elmo
from .extensions import install_extensions
from .output import ElmoOutput
from .similarity import set_similarity_hooks

__all__ = ["ElmoComponent", "ElmoOutput", "install_extensions", "load_bilm", "make_elmo", "set_similarity_hooks"]
