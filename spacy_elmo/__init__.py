"""spacy-elmo: ELMo deep contextualized word representations as a spaCy v3 component."""

from .nn import BiLM, BiLMConfig
from .pipeline import ElmoComponent, ElmoOutput, install_extensions, set_similarity_hooks

__version__ = "0.1.0"

install_extensions()

__all__ = ["BiLM", "BiLMConfig", "ElmoComponent", "ElmoOutput", "install_extensions", "set_similarity_hooks", "__version__"]
