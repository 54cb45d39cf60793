"""The typer app every command module registers with, and clean errors for its commands."""

import contextlib
from typing import Iterator

import typer

from ..io import ModelFileError

app = typer.Typer(name="spacy_elmo", help="ELMo contextual word vectors for spaCy.", no_args_is_help=True)


@contextlib.contextmanager
def clean_errors() -> Iterator[None]:
    """Report a bad file, setting or path as a one-line error, not a traceback."""
    try:
        yield
    except (ModelFileError, ValueError, OSError) as err:
        raise typer.BadParameter(str(err)) from err
