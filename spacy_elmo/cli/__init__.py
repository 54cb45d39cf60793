"""The typer app behind `python -m spacy_elmo`."""
from . import convert, corpus, dump, main, pretrain, warm  # noqa: F401  (register the commands)
from .app import app

__all__ = ["app"]
