"""The typer app behind `python -m spacy_elmo`."""
from .main import app

__all__ = ["app"]
