"""Content digests of files and models, for what a cached or resumed result depends on."""

import hashlib
from pathlib import Path
from typing import Dict, Optional, Union

PathLike = Union[str, Path]


def file_digest(path: Path) -> str:
    """blake2b (16 bytes, hex) of a file's contents."""
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
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
