"""The typer app every command module registers with, and clean errors for its commands."""

import contextlib
import logging
import os
import sys
from typing import Iterator, NoReturn, Optional, Union

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


def parse_mix(mix: str) -> Union[str, int]:
    """A mix setting as typed on the command line: a layer index (negative counts from the
    top) when it reads as an integer, else the name it is ("average", "top")."""
    try:
        return int(mix)
    except ValueError:
        return mix


def run_app() -> None:
    """`python -m spacy_elmo`: run the app. A process that torchrun started as one of several
    ends with `os._exit` once its command is done and its output flushed, skipping Python's
    teardown: DistributedDataParallel keeps the gloo process group, and so gloo's worker
    threads, alive until then, and a worker that lets go of a finished collective during
    the teardown (its tensors are Python objects, freed under the GIL) aborts a successful
    run with "terminate called without an active exception"."""
    from ..training.distributed import launched_as_one_of_several

    if not launched_as_one_of_several():
        app()
        return
    try:
        app()
        status = 0
    except SystemExit as stop:
        status = exit_status(stop.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    end_process(status)


def exit_status(code: Optional[Union[int, str]]) -> int:
    """The status Python gives `SystemExit(code)`: None is 0, a message is printed and is 1."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def end_process(status: int) -> NoReturn:
    """Flush the logs and standard streams, then exit at once, without Python's teardown."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)
