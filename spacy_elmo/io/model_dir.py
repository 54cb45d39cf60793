"""The project's own model format: a directory with `config.json` and `weights.npz`, and
for a word-level biLM `words.json` (its vocabulary, a JSON list of strings).

Weights are a NumPy archive read with `allow_pickle=False`, so loading never unpickles
anything. The same content travels as bytes (for `nlp.to_bytes`) in a msgpack map.
"""

import io
import json
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy
import srsly
import torch

from ..nn.bilm import BiLM, bilm_skeleton
from ..nn.config import BiLMConfig
from .errors import ModelFileError
from .staging import Replaceable, carry_over, staged_directory

FORMAT = "spacy-elmo-bilm"
VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.npz"
WORDS_FILE = "words.json"
MODEL_FILES = (CONFIG_FILE, WEIGHTS_FILE, WORDS_FILE)
PIPELINE_CONFIG_FILE = "config.cfg"
"""What makes a folder a saved spaCy pipeline."""
TRAINING_FILE = "training.json"
"""What a pretraining records beside a model it saves (step, tokens, dev perplexity,
sentence-piece length): a JSON object."""


def is_model_dir(path: Union[str, Path]) -> bool:
    """Whether `path` has a config.json: where a model is looked for (loading it then says
    what is wrong with a damaged one). Before writing over a folder, `holds_saved_model`."""
    return (Path(path) / CONFIG_FILE).is_file()


def holds_saved_model(path: Path) -> bool:
    """Whether `path` holds a model that `save_model` wrote (its config.json says so), and
    may be written over; another program's config.json is not taken for one."""
    try:
        return _is_our_header(_read_header(path / CONFIG_FILE))
    except (ModelFileError, OSError):
        return False


def is_pipeline(path: Union[str, Path]) -> bool:
    """Whether `path` is a saved spaCy pipeline (a folder with a config.cfg)."""
    return (Path(path) / PIPELINE_CONFIG_FILE).is_file()


def find_model_dir(path: Union[str, Path]) -> Path:
    """`path` itself if it is a model directory, or the one model directory inside a
    saved spaCy pipeline (the `elmo` component's folder)."""
    path = Path(path)
    if is_model_dir(path):
        return path
    if is_pipeline(path):
        found = [child for child in sorted(path.iterdir()) if is_model_dir(child)]
        if len(found) == 1:
            return found[0]
        problem = "holds no elmo component" if not found else f"holds several elmo components {[f.name for f in found]}"
        raise ModelFileError(path, f"this spaCy pipeline {problem}")
    raise ModelFileError(path, "neither a spacy-elmo model directory nor a spaCy pipeline with an elmo component")


def load_model_config(path: Union[str, Path]) -> BiLMConfig:
    """The biLM configuration of a model directory, without reading its weights."""
    config_path = Path(path) / CONFIG_FILE
    header = _read_header(config_path)
    return _config_from_header(header, config_path)


def save_model(bilm: BiLM, path: Union[str, Path]) -> None:
    """Write `bilm` to the directory `path`, whole or not at all: a new directory is
    written beside it and swapped in (`staged_directory`), with the other files of a
    model directory already there (a training's softmax.npz, vocab.txt) carried over. An
    existing `path` must be a model directory or empty."""
    path = Path(path)
    with staged_directory(path, replaces=Replaceable(holds_saved_model, "a spacy-elmo model directory")) as staging:
        if path.is_dir():
            carry_over(path, staging, skip=MODEL_FILES)
        write_model_files(bilm, staging)


def write_model_files(bilm: BiLM, path: Union[str, Path]) -> None:
    """Write `bilm`'s files into the directory `path` (created if needed) as they are, for
    writers that stage the whole directory themselves (a training's model directory, a
    pipeline's `to_disk`); other files there stay."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(json.dumps(_header(bilm), indent=2), encoding="utf-8")
    (path / WEIGHTS_FILE).write_bytes(_weights_to_npz(bilm))
    if bilm.words is not None:
        (path / WORDS_FILE).write_text(json.dumps(list(bilm.words)), encoding="utf-8")
    elif (path / WORDS_FILE).exists():  # left by a word model saved here before
        (path / WORDS_FILE).unlink()


def load_model(path: Union[str, Path]) -> BiLM:
    """Read a model directory written by `save_model`."""
    path = Path(path)
    config_path = path / CONFIG_FILE
    if not path.is_dir():
        raise ModelFileError(path, "model directory not found")
    header = _read_header(config_path)
    weights_path = path / WEIGHTS_FILE
    if not weights_path.is_file():
        raise ModelFileError(weights_path, "weight file not found")
    words = None
    if _config_from_header(header, config_path).token_encoder == "words":
        words = read_words(path / WORDS_FILE)
    return _build(header, weights_path.read_bytes(), words, config_path, weights_path, path / WORDS_FILE)


def model_to_bytes(bilm: BiLM) -> bytes:
    message: Dict[str, Any] = {"header": _header(bilm), "weights": _weights_to_npz(bilm)}
    if bilm.words is not None:
        message["words"] = list(bilm.words)
    return srsly.msgpack_dumps(message)


def model_from_bytes(data: bytes, source: str = "<bytes>") -> BiLM:
    try:
        message = srsly.msgpack_loads(data)
        header, weights, words = message["header"], message["weights"], message.get("words")
    except Exception as err:  # msgpack raises several unrelated types
        raise ModelFileError(source, f"not a serialized spacy-elmo model ({err})") from err
    if not isinstance(weights, bytes):
        raise ModelFileError(source, f"not a serialized spacy-elmo model (its weights are {type(weights).__name__}, not bytes)")
    if words is not None and not isinstance(words, list):
        raise ModelFileError(source, "the word vocabulary is not a list of words")
    return _build(header, weights, words, source, source, source)


def read_training_record(model_dir: Union[str, Path]) -> Optional[Dict[str, Any]]:
    """The model directory's training.json; None where it is absent, unreadable or not a
    JSON object (a model saved by `save_model`, a damaged record)."""
    try:
        record = json.loads((Path(model_dir) / TRAINING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def read_words(path: Path) -> List[str]:
    if not path.is_file():
        raise ModelFileError(path, "a word-level biLM needs its vocabulary file, which is missing")
    try:
        words = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFileError(path, f"not valid JSON ({err})") from err
    if not isinstance(words, list):
        raise ModelFileError(path, "expected a JSON list of words")
    return words


def _read_header(config_path: Path) -> Any:
    if not config_path.is_file():
        raise ModelFileError(config_path.parent, f"not a spacy-elmo model directory (no {CONFIG_FILE})")
    try:
        return json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFileError(config_path, f"not valid JSON ({err})") from err


def _is_our_header(header: Any) -> bool:
    return isinstance(header, dict) and header.get("format") == FORMAT


def _config_from_header(header: Any, config_source: Any) -> BiLMConfig:
    if not _is_our_header(header):
        raise ModelFileError(config_source, f"not a {FORMAT} configuration")
    if header.get("version") != VERSION:
        raise ModelFileError(config_source, f"format version {header.get('version')!r} is not supported (expected {VERSION})")
    try:
        return BiLMConfig.from_dict(header["bilm"])
    except (KeyError, TypeError, ValueError) as err:
        raise ModelFileError(config_source, f"invalid biLM configuration ({err})") from err


def _header(bilm: BiLM) -> Dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "bilm": bilm.config.to_dict()}


def _weights_to_npz(bilm: BiLM) -> bytes:
    buffer = io.BytesIO()
    arrays = {name: t.detach().cpu().numpy() for name, t in bilm.state_dict().items()}
    numpy.savez(buffer, **arrays)
    return buffer.getvalue()


def _build(header: Any, weights: bytes, words: Optional[List[str]], config_source: Any, weights_source: Any, words_source: Any) -> BiLM:
    config = _config_from_header(header, config_source)
    if (config.token_encoder == "words") != (words is not None):
        raise ModelFileError(config_source, f"token_encoder {config.token_encoder!r} and the presence of a word vocabulary disagree")
    try:
        expected = bilm_skeleton(config, words).state_dict()  # the file's shapes are checked before anything is allocated
    except ValueError as err:
        raise ModelFileError(words_source, f"invalid word vocabulary ({err})") from err
    arrays = read_arrays(weights, weights_source)
    table = arrays.get("token_encoder.embedding.weight")
    if words is not None and table is not None and table.shape[:1] != (len(words),):
        raise ModelFileError(words_source, f"lists {len(words)} words, the weights have {table.shape[0]} rows")
    missing = sorted(set(expected) - set(arrays))
    unexpected = sorted(set(arrays) - set(expected))
    if missing or unexpected:
        raise ModelFileError(weights_source, f"weights do not match the configuration (missing {missing}, unexpected {unexpected})")
    values = {}
    for name, array in arrays.items():
        if tuple(array.shape) != tuple(expected[name].shape):
            raise ModelFileError(weights_source, f"{name} has shape {array.shape}, the configuration calls for {tuple(expected[name].shape)}")
        if array.dtype.kind != "f":
            raise ModelFileError(weights_source, f"{name} has dtype {array.dtype}, expected floating point")
        with numpy.errstate(over="ignore"):  # a float64 value beyond float32's range becomes inf, refused below
            values[name] = array.astype(numpy.float32)
        if not numpy.all(numpy.isfinite(values[name])):
            raise ModelFileError(weights_source, f"{name} holds NaN or infinite values (or values beyond float32's range)")
    bilm = BiLM(config, words)
    bilm.load_state_dict({name: torch.from_numpy(array) for name, array in values.items()})
    return bilm.eval()


def read_arrays(data: bytes, source: Any) -> Dict[str, numpy.ndarray]:
    """The arrays of a NumPy `.npz` archive, read without unpickling anything."""
    try:
        with numpy.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise ModelFileError(source, f"not a readable weight archive, it may be truncated ({err})") from err
