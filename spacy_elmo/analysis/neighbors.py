"""Nearest uses of a word in context over a corpus index (the paper's Table 4), next to the
nearest words of the context-free layer 0.

An index is a folder, built once per (model, corpus, --limit) and reused:

    meta.json          format, fingerprints (model files, corpus, limit, language), indexed
                       layers and sizes; written last, so a folder without it is unfinished
    layer_<L>.npy      (n_tokens, width) float16, L2-normalised: every token's layer-L vector
    word_vectors.npy   (n_words, width) float16, L2-normalised: layer 0 of each distinct word
                       (layer 0 is context-free, so every use of a word has the same vector)
    words.json         the distinct token texts, in order of first use
    tokens.npy         (n_tokens, 5) int32: word id, doc, position in the doc, character
                       start and end in the doc's text (columns WORD, DOC, POSITION, START, END)
    doc_offsets.npy    (n_docs + 1,) int64: byte offsets of each doc's text in sentences.txt
    sentences.txt      the docs' texts, UTF-8, one after the other

Whitespace tokens are not indexed. Arrays are written through memmaps preallocated after a
counting pass, and searched in chunks, so memory stays bounded whatever the corpus size.
Search is exact and brute force: every row is scored in float32, about 0.9 s of one core
per query for 2.4M tokens at width 512 (benchmarks/neighbors_scaling.py measures the time
against the corpus size).
"""

import contextlib
import hashlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy
import torch
from numpy.lib.format import open_memmap
from spacy.language import Language
from spacy.tokens import Doc
from tqdm import tqdm

from ..io.digests import file_digest, model_digests
from ..pipeline.component import elmo_component
from .vectors import check_keeps_layers, embed, iter_docs, unit_rows

PathLike = Union[str, Path]
Log = Callable[[str], None]

INDEX_FORMAT = "spacy-elmo-neighbors"
INDEX_VERSION = 1
META = "meta.json"
WORDS = "words.json"
WORD_VECTORS = "word_vectors.npy"
TOKENS = "tokens.npy"
DOC_OFFSETS = "doc_offsets.npy"
SENTENCES = "sentences.txt"
WORD, DOC, POSITION, START, END = range(5)
CHUNK_ROWS = 4096
"""Rows scored per step of a search: a float32 chunk of 8 MiB at width 512."""


class DamagedIndexError(ValueError):
    """An index folder whose files are missing, truncated or inconsistent with meta.json."""


def layer_file(layer: int) -> str:
    return f"layer_{layer}.npy"


def is_index_file(name: str) -> bool:
    """Whether `name` is a file an index folder holds (and a rebuild may delete)."""
    fixed = {META, WORDS, WORD_VECTORS, TOKENS, DOC_OFFSETS, SENTENCES}
    return name in fixed or (name.startswith("layer_") and name.endswith(".npy") and name[6:-4].isdigit())


@dataclass
class NeighborIndex:
    """A loaded index; the arrays are read-only memmaps of the files the module docstring lists."""

    path: Path
    meta: Dict[str, Any]
    layers: Dict[int, numpy.ndarray]
    """layer -> (n_tokens, width) float16 unit rows."""
    word_vectors: numpy.ndarray
    """(n_words, width) float16 unit rows: layer 0 per distinct word."""
    words: List[str]
    tokens: numpy.ndarray
    """(n_tokens, 5) int32: WORD, DOC, POSITION, START, END."""
    doc_offsets: numpy.ndarray
    """(n_docs + 1,) int64 byte offsets into sentences.txt."""

    def sentence(self, doc: int) -> str:
        """The text of doc number `doc`."""
        start, end = int(self.doc_offsets[doc]), int(self.doc_offsets[doc + 1])
        with (self.path / SENTENCES).open("rb") as texts:
            texts.seek(start)
            return texts.read(end - start).decode("utf-8")

    def word_counts(self) -> numpy.ndarray:
        """(n_words,) int64: how many indexed tokens each word has."""
        return numpy.bincount(self.tokens[:, WORD], minlength=len(self.words))


# ---------------------------------------------------------------- fingerprints and location


def index_fingerprint(nlp: Language, model: PathLike, options: Optional[PathLike], corpus: PathLike, limit: int) -> Dict[str, Any]:
    """What an index's vectors depend on: the model files, the corpus file, the doc limit,
    the pipeline's language (its tokenizer) and its components (a saved pipeline's sentence
    components run before its elmo one)."""
    corpus = Path(corpus)
    if not corpus.is_file():
        raise ValueError(f"{corpus}: corpus file not found")
    return {"model": model_digests(model, options), "corpus": file_digest(corpus), "limit": limit, "lang": nlp.lang, "components": nlp.pipe_names}


def default_index_dir(model: PathLike, options: Optional[PathLike], corpus: PathLike, limit: int) -> Path:
    """$XDG_CACHE_HOME/spacy_elmo/neighbors/<corpus name>-<digest of the model, options and
    corpus paths and the limit> (XDG_CACHE_HOME defaults to ~/.cache)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    paths = [str(Path(path).resolve()) if path else None for path in (model, options, corpus)]
    key = json.dumps([*paths, limit])
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()
    return cache / "spacy_elmo" / "neighbors" / f"{Path(corpus).name}-{digest}"


# ---------------------------------------------------------------- building


@dataclass
class CorpusCount:
    """What the counting pass learns, enough to preallocate the index."""

    n_docs: int
    n_doc_tokens: int
    """All tokens, whitespace included (the progress bar's total)."""
    n_tokens: int
    """Tokens that are indexed (whitespace excluded)."""
    word_ids: Dict[str, int]
    """Distinct token text -> word id, in order of first use."""


def count_corpus(corpus: PathLike, nlp: Language, limit: int = 0) -> CorpusCount:
    """Docs, tokens and distinct words of the corpus (as `iter_docs` reads it); a ValueError
    when it holds no token to index."""
    count = CorpusCount(0, 0, 0, {})
    for doc in tqdm(iter_docs(corpus, nlp, limit), unit="doc", desc="count"):
        count.n_docs += 1
        count.n_doc_tokens += len(doc)
        for token in doc:
            if not token.is_space:
                count.n_tokens += 1
                count.word_ids.setdefault(token.text, len(count.word_ids))
    if count.n_tokens == 0:
        raise ValueError(f"{corpus} holds no tokens to index")
    return count


def build_index(nlp: Language, corpus: PathLike, directory: PathLike, layers: Sequence[int], fingerprint: Dict[str, Any], limit: int = 0) -> None:
    """Embed the corpus with `nlp` (an `elmo_pipeline`) and write an index of `layers`
    (contextual layers, 1..L) to `directory`, replacing the index there. The files are
    written to a sibling folder first and moved in place when complete."""
    directory = Path(directory)
    bilm = elmo_component(nlp).bilm
    for layer in layers:
        check_contextual_layer(layer, bilm.n_output_layers)
    check_replaceable(directory)
    count = count_corpus(corpus, nlp, limit)
    docs = embed(nlp, iter_docs(corpus, nlp, limit), count.n_doc_tokens, desc="index")
    partial = directory.with_name(directory.name + ".partial")
    _remove_index_folder(partial)
    partial.mkdir(parents=True)
    writer = IndexWriter(partial, count, layers, bilm.config.output_dim)
    try:
        for doc in docs:
            writer.add(doc)
        writer.finish()
    except BaseException:  # Ctrl-C too: no half-built folder of preallocated layer files stays behind
        writer.sentences.close()
        shutil.rmtree(partial, ignore_errors=True)
        raise
    meta = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "corpus_path": str(Path(corpus).resolve()),
        "fingerprint": fingerprint,
        "layers": sorted(layers),
        "n_output_layers": bilm.n_output_layers,
        "width": bilm.config.output_dim,
        "n_docs": count.n_docs,
        "n_tokens": count.n_tokens,
        "n_words": len(count.word_ids),
    }
    (partial / META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    _remove_index_folder(directory)
    partial.rename(directory)


class IndexWriter:
    """Fills an index's files in `folder`, preallocated from the counting pass, doc by doc
    (everything but meta.json)."""

    def __init__(self, folder: Path, count: CorpusCount, layers: Sequence[int], width: int) -> None:
        self.folder = folder
        self.count = count
        self.layers = {layer: open_memmap(folder / layer_file(layer), "w+", numpy.float16, (count.n_tokens, width)) for layer in layers}
        self.word_vectors = open_memmap(folder / WORD_VECTORS, "w+", numpy.float16, (len(count.word_ids), width))
        self.has_word_vector = numpy.zeros(len(count.word_ids), dtype=bool)
        self.tokens = open_memmap(folder / TOKENS, "w+", numpy.int32, (count.n_tokens, 5))
        self.doc_offsets = open_memmap(folder / DOC_OFFSETS, "w+", numpy.int64, (count.n_docs + 1,))
        self.sentences = (folder / SENTENCES).open("wb")
        self.n_docs = self.n_tokens = self.n_bytes = 0

    def add(self, doc: Doc) -> None:
        """Append an embedded doc: its non-whitespace tokens, their vectors, its text."""
        kept = [token for token in doc if not token.is_space]
        start, end = self.n_tokens, self.n_tokens + len(kept)
        unknown = any(token.text not in self.count.word_ids for token in kept)
        if self.n_docs == self.count.n_docs or end > self.count.n_tokens or unknown:
            raise self._changed()
        positions = numpy.array([token.i for token in kept], dtype=numpy.int64)
        word_ids = numpy.array([self.count.word_ids[token.text] for token in kept], dtype=numpy.int32)
        self.tokens[start:end, WORD] = word_ids
        self.tokens[start:end, DOC] = self.n_docs
        self.tokens[start:end, POSITION] = positions
        self.tokens[start:end, START] = [token.idx for token in kept]
        self.tokens[start:end, END] = [token.idx + len(token.text) for token in kept]
        layers = doc._.elmo.layers
        for layer, vectors in self.layers.items():
            vectors[start:end] = unit_rows(layers[layer, positions])
        new = numpy.flatnonzero(~self.has_word_vector[word_ids])
        first_uses = new[numpy.unique(word_ids[new], return_index=True)[1]]
        self.word_vectors[word_ids[first_uses]] = unit_rows(layers[0, positions[first_uses]])
        self.has_word_vector[word_ids[first_uses]] = True
        text = doc.text.encode("utf-8")
        self.sentences.write(text)
        self.doc_offsets[self.n_docs] = self.n_bytes
        self.n_docs, self.n_tokens, self.n_bytes = self.n_docs + 1, end, self.n_bytes + len(text)

    def finish(self) -> None:
        """Check that every counted doc came, write the words, flush and close the files."""
        self.sentences.close()
        if self.n_docs != self.count.n_docs or self.n_tokens != self.count.n_tokens:
            raise self._changed()
        self.doc_offsets[self.n_docs] = self.n_bytes
        for array in (*self.layers.values(), self.word_vectors, self.tokens, self.doc_offsets):
            array.flush()
        (self.folder / WORDS).write_text(json.dumps(list(self.count.word_ids), ensure_ascii=False), encoding="utf-8")

    def _changed(self) -> ValueError:
        return ValueError(f"the corpus changed while it was being indexed (at doc {self.n_docs + 1})")


def check_replaceable(directory: Path) -> None:
    """A ValueError unless `directory` is absent or holds nothing but index files."""
    if not directory.exists():
        return
    if not directory.is_dir():
        raise ValueError(f"{directory} is a file, not an index folder")
    foreign = [entry.name for entry in directory.iterdir() if not (entry.is_file() and is_index_file(entry.name))]
    if foreign:
        raise ValueError(
            f"{directory} holds files that are not part of a neighbors index ({', '.join(sorted(foreign)[:3])}): give --index a new or empty folder"
        )


def _remove_index_folder(directory: Path) -> None:
    """Delete `directory` (absent, or holding only index files)."""
    check_replaceable(directory)
    if directory.exists():
        shutil.rmtree(directory)


# ---------------------------------------------------------------- loading


def load_index(directory: PathLike) -> NeighborIndex:
    """The index in `directory`; a DamagedIndexError naming the file when a file is missing,
    truncated, of another format version, or does not match meta.json."""
    directory = Path(directory)
    meta = _read_json(directory / META)
    if not isinstance(meta, dict) or meta.get("format") != INDEX_FORMAT or meta.get("version") != INDEX_VERSION:
        raise DamagedIndexError(f"{directory / META}: not a {INDEX_FORMAT} index of version {INDEX_VERSION}")
    try:
        n_tokens, n_words, width, n_docs = (int(meta[key]) for key in ("n_tokens", "n_words", "width", "n_docs"))
        layer_numbers = [int(layer) for layer in meta["layers"]]
    except (KeyError, TypeError, ValueError) as err:
        raise DamagedIndexError(f"{directory / META}: {err!r}") from err
    layers = {layer: _load_array(directory / layer_file(layer), (n_tokens, width), numpy.float16) for layer in layer_numbers}
    word_vectors = _load_array(directory / WORD_VECTORS, (n_words, width), numpy.float16)
    tokens = _load_array(directory / TOKENS, (n_tokens, 5), numpy.int32)
    doc_offsets = _load_array(directory / DOC_OFFSETS, (n_docs + 1,), numpy.int64)
    words = _read_json(directory / WORDS)
    if not isinstance(words, list) or len(words) != n_words:
        raise DamagedIndexError(f"{directory / WORDS}: not the list of {n_words} words meta.json gives")
    sentences = directory / SENTENCES
    if not sentences.is_file() or sentences.stat().st_size != doc_offsets[-1]:
        raise DamagedIndexError(f"{sentences}: missing, or not the size {DOC_OFFSETS} gives")
    return NeighborIndex(directory, meta, layers, word_vectors, words, tokens, doc_offsets)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DamagedIndexError(f"{path}: {err}") from err


def _load_array(path: Path, shape: Tuple[int, ...], dtype: Any) -> numpy.ndarray:
    """A read-only memmap of the .npy file at `path`, checked against `shape` and `dtype`."""
    try:
        array = numpy.load(path, mmap_mode="r")
    except (OSError, ValueError) as err:
        raise DamagedIndexError(f"{path}: {err}") from err
    if array.shape != shape or array.dtype != dtype:
        raise DamagedIndexError(f"{path}: {array.dtype} {array.shape}, expected {numpy.dtype(dtype)} {shape}")
    return array


def stale_reason(meta: Dict[str, Any], fingerprint: Dict[str, Any]) -> Optional[str]:
    """Why an index with `meta` does not hold the vectors `fingerprint` describes; None if it does."""
    stored = meta.get("fingerprint")
    if not isinstance(stored, dict):
        return "it has no fingerprint"
    changes = (
        ("model", "the model changed"),
        ("corpus", "the corpus changed"),
        ("lang", "the pipeline language changed"),
        ("components", "the components before the elmo one changed"),
    )
    for key, what in changes:
        if stored.get(key) != fingerprint[key]:
            return what
    if stored.get("limit") != fingerprint["limit"]:
        return f"it was built with --limit {stored.get('limit')}"
    return None


def open_index(
    nlp: Language,
    model: PathLike,
    corpus: PathLike,
    directory: PathLike,
    layer: int,
    options: Optional[PathLike] = None,
    limit: int = 0,
    log: Log = print,
) -> NeighborIndex:
    """The index of `corpus` under `model` in `directory` holding `layer`: reused when its
    fingerprint matches and it holds `layer`; built again otherwise, of `layer` and the
    layers it had when only `layer` was missing, else of `layer` alone (missing, stale or
    damaged). `log` gets one line saying which."""
    directory = Path(directory)
    fingerprint = index_fingerprint(nlp, model, options, corpus, limit)
    layers = [layer]
    if (directory / META).is_file():
        try:
            index = load_index(directory)
        except DamagedIndexError as err:
            log(f"rebuilding index {directory}: it is damaged ({err})")
        else:
            reason = stale_reason(index.meta, fingerprint)
            if reason is None and layer in index.layers:
                log(f"reusing index {directory} ({index.meta['n_tokens']} tokens, layers {index.meta['layers']})")
                return index
            if reason is None:
                layers = sorted(set(index.layers) | {layer})
                reason = f"layer {layer} is not indexed"
            log(f"rebuilding index {directory}: {reason}")
    else:
        log(f"building index {directory}")
    build_index(nlp, corpus, directory, layers, fingerprint, limit)
    return load_index(directory)


# ---------------------------------------------------------------- queries and search


def check_contextual_layer(layer: int, n_output_layers: int) -> None:
    """A ValueError unless `layer` is one of the contextual layers 1..n_output_layers - 1."""
    if not 1 <= layer < n_output_layers:
        raise ValueError(f"layer {layer} is not a contextual layer of this model (1..{n_output_layers - 1})")


def resolve_layer(layer: int, n_output_layers: int) -> int:
    """A --layer value (negative counts from the top, -1 is the top) as a contextual layer
    index 1..L; a ValueError for layer 0 (context-free: its column is always shown) and out
    of range values."""
    top = n_output_layers - 1
    resolved = layer + n_output_layers if layer < 0 else layer
    choices = f"choose 1..{top} or -{top}..-1"
    if resolved == 0:
        name = "layer 0" if layer == 0 else f"layer {layer} (layer 0)"
        raise ValueError(f"{name} is the context-free layer, whose nearest words are always shown: {choices}")
    if not 0 < resolved <= top:
        raise ValueError(f"layer {layer} is out of range: the model has layers 0..{top}, so {choices}")
    return resolved


@dataclass
class Query:
    """The query token in its sentence, with its vectors."""

    sentence: str
    word: str
    position: int
    start: int
    end: int
    layers: numpy.ndarray
    """(L + 1, width) float32: the token's vector on every layer."""


def embed_query(nlp: Language, sentence: str, word: str, occurrence: int = 1) -> Query:
    """Embed `sentence` and pick the `occurrence`-th token (1-based) whose text is `word`; a
    ValueError naming the sentence's tokens when there is no such token."""
    check_keeps_layers(nlp)
    doc = nlp.make_doc(sentence)
    matches = [token.i for token in doc if token.text == word and not token.is_space]
    if not matches:
        tokens = ", ".join(repr(token.text) for token in doc if not token.is_space)
        raise ValueError(f"{word!r} is not a token of the sentence (its tokens: {tokens})")
    if not 1 <= occurrence <= len(matches):
        raise ValueError(f"{word!r} occurs {len(matches)} time(s) in the sentence: --occurrence must be 1..{len(matches)}")
    position = matches[occurrence - 1]
    doc = nlp(doc)
    token = doc[position]
    return Query(doc.text, word, position, token.idx, token.idx + len(token.text), doc._.elmo.layers[:, position].copy())


def top_k_cosine(rows: numpy.ndarray, query: numpy.ndarray, k: int, chunk_rows: int = CHUNK_ROWS) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Exact top-k of `rows` (n, width), unit rows of any float dtype, by dot product with
    `query` (width,) made unit, scored in float32 `chunk_rows` rows at a time. Returns
    (row indices (k',), cosines (k',) float32), best first, ties in row order; k' = min(k, n).

    Each row's score is computed the same way wherever the row is (numpy's einsum, not a
    BLAS gemv whose rounding depends on the row's place in a block), so equal rows tie."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    n, width = rows.shape
    query_unit = unit_rows(numpy.asarray(query).reshape(1, width))[0]
    buffer = numpy.empty((min(chunk_rows, n), width), dtype=numpy.float32)
    best_rows = numpy.empty(0, dtype=numpy.int64)
    best_scores = numpy.empty(0, dtype=numpy.float32)
    with warnings.catch_warnings(), one_torch_thread():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for start in range(0, n, chunk_rows):
            chunk = buffer[: min(chunk_rows, n - start)]
            # torch converts float16 to float32 four times faster than numpy does
            torch.from_numpy(chunk).copy_(torch.from_numpy(numpy.ascontiguousarray(rows[start : start + len(chunk)])))
            scores = numpy.einsum("ij,j->i", chunk, query_unit)
            if len(scores) > k:
                kth = numpy.partition(scores, len(scores) - k)[len(scores) - k]
                hits = numpy.flatnonzero(scores >= kth)
            else:
                hits = numpy.arange(len(scores))
            best_rows, best_scores = _best(numpy.concatenate([best_rows, hits + start]), numpy.concatenate([best_scores, scores[hits]]), k)
    return best_rows, best_scores


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch ops on one thread: on a busy machine the waiting OpenMP threads of a
    parallel copy cost far more than they save (4.7 s against 0.9 s a query at 2.4M rows
    with two threads on two busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _best(rows: numpy.ndarray, scores: numpy.ndarray, k: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The k best (rows, scores): highest score first, lower row first among equal scores."""
    order = numpy.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


@dataclass
class Use:
    """One use of a word in the corpus, with its cosine to the query."""

    cosine: float
    word: str
    doc: int
    position: int
    start: int
    end: int
    sentence: str

    def marked(self, context: Optional[int] = None) -> str:
        """The sentence with the word in [brackets], on one line; at most `context`
        characters either side of it when given."""
        return marked_sentence(self.sentence, self.start, self.end, context)


def marked_sentence(text: str, start: int, end: int, context: Optional[int] = None) -> str:
    """`text` with text[start:end] in [brackets], whitespace runs as single spaces; with
    `context`, cut to that many characters either side, "..." marking the cuts."""
    before, word, after = (" ".join(part.split()) for part in (text[:start], text[start:end], text[end:]))
    if context is not None:
        before = before if len(before) <= context else "..." + before[len(before) - context :]
        after = after if len(after) <= context else after[:context] + "..."
    return " ".join(part for part in (before, f"[{word}]", after) if part)


def nearest_uses(index: NeighborIndex, layer: int, query: numpy.ndarray, k: int, chunk_rows: int = CHUNK_ROWS) -> List[Use]:
    """The k indexed tokens nearest to `query` (width,) by cosine on `layer`, best first."""
    if layer not in index.layers:
        raise ValueError(f"layer {layer} is not in the index at {index.path} (it holds {sorted(index.layers)})")
    rows, scores = top_k_cosine(index.layers[layer], query, k, chunk_rows)
    uses = []
    for row, score in zip(rows, scores):
        word, doc, position, start, end = (int(value) for value in index.tokens[row])
        uses.append(Use(float(score), index.words[word], doc, position, start, end, index.sentence(doc)))
    return uses


@dataclass
class WordMatch:
    """A distinct corpus word, its layer-0 cosine to the query, and its number of uses."""

    word: str
    cosine: float
    uses: int


def nearest_words(index: NeighborIndex, query: numpy.ndarray, word: str, k: int, chunk_rows: int = CHUNK_ROWS) -> List[WordMatch]:
    """The k distinct words nearest to `query` (width,), a layer-0 vector, by cosine,
    leaving out `word` and its case variants."""
    excluded = {i for i, other in enumerate(index.words) if other.lower() == word.lower()}
    rows, scores = top_k_cosine(index.word_vectors, query, k + len(excluded), chunk_rows)
    counts = index.word_counts()
    kept = [(row, score) for row, score in zip(rows, scores) if row not in excluded][:k]
    return [WordMatch(index.words[row], float(score), int(counts[row])) for row, score in kept]
