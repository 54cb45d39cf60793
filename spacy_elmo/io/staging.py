"""Writes that replace a file or a directory only once the new one is whole.

Every file and directory that spacy-elmo writes goes to a hidden staging path beside its
place, is flushed to the disk and is then renamed into place: a write that fails part-way
(a full disk, a permission error, Ctrl-C) leaves what was there before, and removes its
staging path. A directory is swapped in with two renames (the old one aside to a staging
name, `NAME.staging-retired-x1y2`, the new one to `NAME`), and put back if the second fails;
`put_back_retired` finishes a swap that a killed process left between its renames.
"""

import contextlib
import glob
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, NamedTuple, Optional, Sequence, Union

STAGING_MARK = ".staging-"
"""In the name of every staging file and folder (`.last.pt.staging-x1y2`,
`model-best.staging-x1y2`), and of nothing a user would name: only such names are removed."""
RETIRED_MARK = STAGING_MARK + "retired-"
"""In the name of a directory between the two renames of its swap (`model-best.staging-retired-x1y2`)."""
_UMASK = os.umask(0)
os.umask(_UMASK)  # read once, at import: setting it is the only way to read it
FILE_MODE, DIRECTORY_MODE = 0o666 & ~_UMASK, 0o777 & ~_UMASK
"""What `open` and `mkdir` would give: mkstemp and mkdtemp create their staging paths
private (0o600, 0o700), and a written file or directory should end up as any other."""


class WriteError(OSError):
    """Writing `path` failed part-way; what was there before is left as it was."""

    def __init__(self, path: Union[str, Path], cause: OSError, hint: str = "") -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path = Path(path)
        self.cause = cause
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.path}: could not be written ({self.strerror})" + (f"; {self.hint}" if self.hint else "")


@contextlib.contextmanager
def staged_file(path: Union[str, Path]) -> Iterator[Path]:
    """An empty staging file beside `path` for the block to write; when the block ends it
    is flushed to the disk and renamed to `path`, and removed if the block fails. Any
    OSError, the block's included, becomes a `WriteError` naming `path`: a block that also
    reads other files must report their errors otherwise."""
    path = Path(path)
    staging: Optional[Path] = None
    try:
        with _naming(path, lambda: staging):
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{STAGING_MARK}")
            staging = Path(name)
            os.close(handle)
            os.chmod(staging, FILE_MODE)
            yield staging
            _fsync_path(staging)
            os.replace(staging, path)
            _fsync_directory(path.parent)  # the rename itself survives a power cut
    finally:
        if staging is not None:
            staging.unlink(missing_ok=True)


def write_atomically(path: Union[str, Path], write: Callable[[BinaryIO], object]) -> None:
    """`write` into a staging file beside `path`, then rename it to `path` (`staged_file`)."""
    with staged_file(path) as staging, staging.open("wb") as out:
        write(out)


def write_text_atomically(path: Union[str, Path], text: str) -> None:
    """`text` as UTF-8 to `path`, whole or not at all (`staged_file`)."""
    data = text.encode("utf-8")
    write_atomically(path, lambda out: out.write(data))


def refuse_writing_over_inputs(output: Union[str, Path], inputs: Iterable[Optional[Union[str, Path]]]) -> None:
    """A ValueError, before anything is read or written, where writing `output` would
    replace what a command reads: `output` is one of `inputs` (the same file through any
    link), lies inside one (a model or text folder), or, a folder, holds one. Inputs
    given as None are skipped."""
    written = Path(output).resolve()
    for given in inputs:
        if given is None:
            continue
        read = Path(given).resolve()
        if written == read or written.is_relative_to(read) or read.is_relative_to(written):
            relation = "is" if written == read else "lies inside" if written.is_relative_to(read) else "holds"
            raise ValueError(f"{output}: the output {relation} {given}, which this command reads; give another output path")


class Replaceable(NamedTuple):
    """Which existing directories a `staged_directory` may replace, besides empty ones."""

    test: Callable[[Path], bool]
    """True for a directory holding only what the writer itself writes."""
    description: str
    """What `test` accepts, for the error: "a spacy-elmo model directory"."""


@contextlib.contextmanager
def staged_directory(path: Union[str, Path], replaces: Optional[Replaceable] = None) -> Iterator[Path]:
    """An empty staging directory beside `path` for the block to fill; when the block ends
    its files are flushed to the disk and it is swapped in for `path` (whose previous
    content is removed), and it is removed if the block fails. Any OSError, the block's
    included, becomes a `WriteError` naming `path` (see `staged_file`).

    First a swap of `path` that a killed process left half done is finished
    (`put_back_retired`). With `replaces`, an existing `path` must be an empty directory or
    one that `replaces.test` accepts, and must not hold the working directory: else a
    ValueError, before anything is written."""
    path = _real_place(path)
    staging: Optional[Path] = None
    try:
        with _naming(path, lambda: staging):
            put_back_retired(path)
            if replaces is not None and path.exists():
                _check_replaceable(path, replaces)
            path.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=path.name + STAGING_MARK))
            os.chmod(staging, DIRECTORY_MODE)
            yield staging
            for root, _, files in os.walk(staging):  # on disk before the renames make them the content
                for name in files:
                    _fsync_path(Path(root) / name)
                _fsync_directory(Path(root))
            _swap_in(staging, path)
            _fsync_directory(path.parent)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _real_place(path: Union[str, Path]) -> Path:
    """The absolute path ("." has no name to stage beside), through a symbolic link at its
    end: a linked directory is replaced where it lies, and the link stays."""
    path = Path(os.path.abspath(path))
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _check_replaceable(path: Path, replaces: Replaceable) -> None:
    try:
        working = Path.cwd().resolve()
    except OSError:  # the working directory was removed: it lies in nothing
        working = None
    if working is not None and working.is_relative_to(path.resolve()):
        raise ValueError(f"{path}: holds the working directory; give a new or empty directory")
    if not (path.is_dir() and (not any(path.iterdir()) or replaces.test(path))):
        raise ValueError(f"{path}: already exists and is neither empty nor {replaces.description}; give a new or empty directory")


def carry_over(source: Path, target: Path, skip: Sequence[str] = ()) -> None:
    """Put every entry of the directory `source` but those named in `skip` into `target`,
    as hard links where the file system allows them (no copy), else as copies."""
    for entry in source.iterdir():
        if entry.name in skip:
            continue
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, target / entry.name)


def _link_or_copy(source: Union[str, Path], target: Union[str, Path]) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def put_back_retired(path: Union[str, Path]) -> None:
    """Finish what a process killed during a swap of `path` left: the directory it had moved
    aside becomes `path` again where `path` is missing (the latest, if several), and the
    others are removed."""
    path = _real_place(path)
    retired = sorted(path.parent.glob(glob.escape(path.name) + RETIRED_MARK + "*"), key=lambda p: p.lstat().st_mtime)
    if retired and not path.exists():
        os.replace(retired.pop(), path)
    for leftover in retired:
        if leftover.is_symlink():
            leftover.unlink()
        else:
            shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def _naming(path: Path, staging: Callable[[], Optional[Path]]) -> Iterator[None]:
    """OSErrors raised inside become `WriteError`s naming `path`, those naming a file of
    the staging path too (which is gone by the time anyone reads the error)."""
    try:
        yield
    except WriteError as err:
        inside = staging()
        if inside is None or not (err.path == inside or inside in err.path.parents):
            raise
        raise WriteError(path, err.cause, err.hint) from err.cause
    except OSError as err:
        raise WriteError(path, err) from err


def _swap_in(staging: Path, target: Path) -> None:
    retired: Optional[Path] = None
    if target.exists():
        retired = target.with_name(f"{target.name}{RETIRED_MARK}{secrets.token_hex(4)}")
        os.replace(target, retired)
    try:
        os.replace(staging, target)
    except OSError:
        if retired is not None:
            os.replace(retired, target)
        raise
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)


def _fsync_directory(path: Path) -> None:
    """Flush a directory's entries to the disk, where the platform can open a directory."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory handles
        return
    _fsync_and_close(handle)


def _fsync_path(path: Path) -> None:
    _fsync_and_close(os.open(path, os.O_RDWR))  # Windows flushes only handles open for writing


def _fsync_and_close(handle: int) -> None:
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
