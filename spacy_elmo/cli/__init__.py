"""The typer app behind `python -m spacy_elmo`."""

from . import convert, corpus, dump, main, neighbors, pretrain, probe, report, validate, warm  # noqa: F401  (register the commands)
from .app import app, run_app

__all__ = ["app", "run_app"]
