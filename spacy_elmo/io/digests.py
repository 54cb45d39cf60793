"""Content digests of files and models, for what a cached or resumed result depends on."""

import hashlib
from pathlib import Path
from typing import Callable, Dict, Optional, Union

PathLike = Union[str, Path]


def _hash_contents(update: Callable[[bytes], None], path: Path) -> None:
    """Feed `path`'s bytes to a digest's `update`, a megabyte at a time."""
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            update(block)


def file_digest(path: Path) -> str:
    """blake2b (16 bytes, hex) of a file's contents."""
    digest = hashlib.blake2b(digest_size=16)
    _hash_contents(digest.update, path)
    return digest.hexdigest()


def tree_digest(path: Path) -> str:
    """sha256 (hex) over the names and contents of a file, or of every file under a folder
    (by path relative to it, in sorted order): one string for a whole input, as the
    downstream twins record each of theirs (sha256, so that earlier records still match)."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(path) if file != path else file.name).encode())
        _hash_contents(digest.update, file)
    return digest.hexdigest()


def model_digests(model: PathLike, options: Optional[PathLike] = None) -> Dict[str, str]:
    """Digest of every file of the model (a folder's files by relative path, or the weight
    file), and of its options.json under "options"."""
    root = Path(model)
    if root.is_dir():
        digests = {str(path.relative_to(root)): file_digest(path) for path in sorted(root.rglob("*")) if path.is_file()}
    elif root.is_file():
        digests = {root.name: file_digest(root)}
    else:
        raise ValueError(f"{root}: model not found")
    if options is not None:
        digests["options"] = file_digest(Path(options))
    return digests
