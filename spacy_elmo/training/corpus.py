"""Corpus preparation for biLM pretraining, in the bilm-tf layout.

Text is tokenized with the same spaCy tokenizer that inference uses, split into
sentences, deduplicated, shuffled with a seed and split into train / dev / test. Output:
`train/shard_00000.txt ...`, `dev.txt`, `test.txt` (one sentence per line, tokens joined by
single spaces), `vocab.txt` (`<S>`, `</S>`, `<UNK>`, then training tokens by descending
count) and `stats.json`. The sentences are held in memory to be shuffled.

Hostile input is cleaned, not fatal, and every change is counted in `stats.json`: bytes
that are not UTF-8 (and lone surrogates in .jsonl escapes) become U+FFFD, control
characters other than whitespace are removed, documents are cut to `max_document_chars`
characters before tokenizing (text files are read in chunks, so the rest of a long line is
never held in memory), runs of more than MAX_RUN_CHARS characters without whitespace are
cut (spaCy's tokenizer takes time quadratic in the affixes of one run: 20 s for 10,000
brackets), and documents left empty are dropped. An input that leaves no
training sentence is an error naming it.
"""

import codecs
import dataclasses
import hashlib
import json
import math
import random
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, List, Match, NamedTuple, Optional, Sequence, Tuple, Union, cast

import spacy
import srsly
from spacy.language import Language
from spacy.tokens import DocBin

from ..io.staging import refuse_writing_over_inputs
from ..languages import blank_language
from ..nn.special_tokens import SPECIAL_TOKENS
from .data import PREPARING_MARK, VOCAB_FILE, Vocabulary

MAX_DOCUMENT_CHARS = 10_000_000
"""Documents are cut to this many characters before tokenizing (the default of `max_document_chars`)."""
MAX_CHARS_PER_PIECE = 100_000
"""Documents longer than this are tokenized in pieces cut at whitespace."""
PIECES_PER_BATCH = 16
"""Pieces tokenized together: at most 1.6 million characters of Docs in memory at once."""
JSONL_LINE_FACTOR = 6
"""A .jsonl line longer than this many times `max_document_chars` (room for \\uXXXX
escapes) is dropped unparsed."""
READ_BYTES = 1 << 20
"""Text files are read in chunks of at most this many bytes."""
MAX_RUN_CHARS = 100
"""Longer runs of characters without whitespace are cut into runs of this length."""
_CONTROL_CHARACTERS = "".join(c for c in map(chr, range(0xA0)) if unicodedata.category(c) == "Cc" and not c.isspace())
_CONTROLS = re.compile(f"[{re.escape(_CONTROL_CHARACTERS)}]")
_SURROGATES = re.compile("[\ud800-\udfff]")
_LEADING_SPACE = re.compile(r"\s*")
_THROUGH_LAST_SPACE = re.compile(r".*\s", re.DOTALL)
_LONG_RUN = re.compile(rf"(?<!\S)\S{{{MAX_RUN_CHARS + 1},}}")
"""A long run, matched from its start only (linear time)."""


@dataclass
class CorpusStats:
    """What `prepare_corpus` read, changed, dropped and wrote (saved as `stats.json`).
    The cleaning counts are over the text kept after cutting for length."""

    documents: int = 0
    """Documents tokenized (non-empty after cleaning)."""
    lines_with_invalid_utf8: int = 0
    """Lines (or .jsonl / .spacy documents) with bytes that are not UTF-8 or with lone
    surrogates; each such byte or surrogate became U+FFFD."""
    control_characters_removed: int = 0
    """NUL and other control characters (Unicode Cc, whitespace excepted) removed."""
    documents_cut_for_length: int = 0
    """Documents cut to `max_document_chars` characters."""
    characters_cut_for_length: int = 0
    """Characters those cuts removed (a cut line's newline not counted)."""
    long_runs_split: int = 0
    """Runs of more than MAX_RUN_CHARS characters without whitespace, cut into runs of
    MAX_RUN_CHARS joined by spaces."""
    jsonl_lines_dropped_for_length: int = 0
    """.jsonl lines over `JSONL_LINE_FACTOR * max_document_chars` characters, not parsed."""
    empty_documents_dropped: int = 0
    """Documents (blank lines included) with no text left after cleaning."""
    sentences: int = 0
    duplicate_sentences: int = 0
    tokens: int = 0
    train_sentences: int = 0
    dev_sentences: int = 0
    test_sentences: int = 0
    vocab_size: int = 0


class _Raw(NamedTuple):
    """A document as read, before cleaning."""

    text: str
    cut: int = 0
    """Characters cut off for length."""
    invalid: bool = False
    """Invalid UTF-8 already replaced while reading."""


def read_documents(path: Union[str, Path], stats: CorpusStats, max_chars: int = MAX_DOCUMENT_CHARS) -> Iterator[str]:
    """Documents of a .txt file (one per line), a folder of .txt files, a .jsonl file with a
    `text` field, or a .spacy DocBin, cleaned (see the module docstring) and counted in `stats`."""
    if max_chars < 1:
        raise ValueError(f"max_document_chars must be positive, got {max_chars}")
    for raw in _raw_documents(Path(path), max_chars, stats):
        text = _clean(raw, stats)
        if text:
            yield text
        else:
            stats.empty_documents_dropped += 1


def _raw_documents(path: Path, max_chars: int, stats: CorpusStats) -> Iterator[_Raw]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise ValueError(f"{path}: folder holds no .txt files")
        for file in files:
            yield from _text_documents(file, max_chars)
    elif not path.is_file():
        raise ValueError(f"{path}: input not found")
    elif path.suffix == ".spacy":
        yield from _docbin_documents(path, max_chars)
    elif path.suffix == ".jsonl":
        yield from _jsonl_documents(path, max_chars, stats)
    else:
        yield from _text_documents(path, max_chars)


def _clean(raw: _Raw, stats: CorpusStats) -> str:
    """`raw.text` with lone surrogates replaced by U+FFFD, control characters removed and
    long runs cut, stripped; what was changed is counted in `stats`."""
    text, replaced = _SURROGATES.subn("\ufffd", raw.text)
    text, removed = _CONTROLS.subn("", text)
    text, split = _LONG_RUN.subn(_split_run, text)
    stats.long_runs_split += split
    stats.lines_with_invalid_utf8 += bool(replaced or raw.invalid)
    stats.control_characters_removed += removed
    if raw.cut:
        stats.documents_cut_for_length += 1
        stats.characters_cut_for_length += raw.cut
    return text.strip()


def _split_run(match: "re.Match[str]") -> str:
    run = match.group()
    return " ".join(run[start : start + MAX_RUN_CHARS] for start in range(0, len(run), MAX_RUN_CHARS))


def _cut(text: str, max_chars: int, invalid: bool = False) -> _Raw:
    return _Raw(text[:max_chars], max(len(text) - max_chars, 0), invalid)


def _text_documents(path: Path, max_chars: int) -> Iterator[_Raw]:
    for line, cut in read_lines(path, max_chars):
        yield _Raw(line, cut)


def read_lines(path: Path, max_chars: int) -> Iterator[Tuple[str, int]]:
    """(line without its newline, cut to `max_chars` characters; how many were cut) for each
    line of a file, read in chunks of READ_BYTES. Bytes that are not UTF-8 come out as lone
    surrogates (Python's surrogateescape)."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")("surrogateescape")
    with path.open("rb") as handle:
        kept: List[str] = []
        room, cut = max_chars, 0
        while True:
            chunk = handle.readline(READ_BYTES)
            text = decoder.decode(chunk, final=not chunk)
            line_ends = not chunk or chunk.endswith(b"\n")
            if line_ends and text.endswith("\n"):
                text = text[:-1]
            kept.append(text[:room])
            cut += max(len(text) - room, 0)
            room = max(room - len(text), 0)
            if not line_ends:
                continue
            line = "".join(kept)
            if chunk or line:
                yield line, cut
            if not chunk:
                return
            kept, room, cut = [], max_chars, 0


def _jsonl_documents(path: Path, max_chars: int, stats: CorpusStats) -> Iterator[_Raw]:
    for number, (line, cut) in enumerate(read_lines(path, JSONL_LINE_FACTOR * max_chars), start=1):
        if cut:
            stats.jsonl_lines_dropped_for_length += 1
            continue
        line, invalid = _SURROGATES.subn("\ufffd", line)
        if not line.strip():
            continue
        try:
            record = srsly.json_loads(line)
        except ValueError as err:
            raise ValueError(f"{path} line {number}: not valid JSON ({err})") from err
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise ValueError(f"{path} line {number}: expected an object with a string 'text' field")
        yield _cut(record["text"], max_chars, bool(invalid))


def _docbin_documents(path: Path, max_chars: int) -> Iterator[_Raw]:
    try:
        docs = DocBin().from_disk(path)
    except Exception as err:  # spaCy, msgpack and zlib raise several unrelated types
        raise ValueError(f"{path}: not a readable .spacy DocBin ({err})") from err
    for doc in docs.get_docs(spacy.blank("xx").vocab):
        yield _cut(doc.text, max_chars)


def _pieces(text: str) -> Iterator[str]:
    """`text` cut at whitespace into pieces of at most about MAX_CHARS_PER_PIECE characters."""
    start = 0
    while len(text) - start > MAX_CHARS_PER_PIECE:
        through_last_space = _THROUGH_LAST_SPACE.match(text, start, start + MAX_CHARS_PER_PIECE)
        cut = through_last_space.end() - 1 if through_last_space else start
        cut = cut if cut > start else start + MAX_CHARS_PER_PIECE
        yield text[start:cut]
        start = cast(Match[str], _LEADING_SPACE.match(text, cut)).end()  # the pattern matches the empty string
    if start < len(text):
        yield text[start:]


def tokenized_sentences(nlp: Language, documents: Iterable[str], stats: CorpusStats) -> Iterator[List[str]]:
    """Sentences as token lists; whitespace tokens dropped, whitespace inside a token removed."""

    def pieces() -> Iterator[str]:
        for document in documents:
            stats.documents += 1
            yield from _pieces(document)

    for doc in nlp.pipe(pieces(), batch_size=PIECES_PER_BATCH):
        for sentence in doc.sents:
            tokens = ["".join(ch for ch in t.text if not ch.isspace()) for t in sentence if not t.is_space]
            tokens = [t for t in tokens if t]
            if tokens:
                yield tokens


def sentence_pipeline(lang: str) -> Language:
    """The language's tokenizer (as at inference) plus a rule-based sentencizer; a ValueError
    naming the language where spaCy has none of that code, or lacks its tokenizer's package."""
    nlp = blank_language(lang)
    nlp.add_pipe("sentencizer")
    return nlp


def prepare_corpus(
    input_path: Union[str, Path],
    output_dir: Union[str, Path],
    lang: str = "en",
    seed: int = 0,
    dev_fraction: float = 0.01,
    test_fraction: float = 0.01,
    sentences_per_shard: int = 100_000,
    min_count: int = 1,
    max_vocab: int = 0,
    vocab_path: Optional[Union[str, Path]] = None,
    max_document_chars: int = MAX_DOCUMENT_CHARS,
    extend_vocab: bool = False,
    rank_vocab: bool = False,
) -> CorpusStats:
    """Prepare `input_path` into `output_dir`; returns (and writes) the statistics.

    `vocab_path`: use this vocab.txt (e.g. the model's that training will continue from)
    instead of building one from the training split; `min_count` and `max_vocab` then do not apply.
    `extend_vocab`: with `vocab_path`, append the training tokens it lacks that are seen at
    least `min_count` times (most frequent first), so that adapting a model to new text
    learns to predict its frequent words rather than `<UNK>` for them.
    `rank_vocab`: with `vocab_path`, rank its words (and the added ones) by their counts in
    the training split (`vocab_from_given`).
    `max_document_chars`: documents are cut to this many characters before tokenizing.
    ValueError, before anything is written, when no training sentence is left."""
    if not (0 <= dev_fraction < 1 and 0 <= test_fraction < 1 and dev_fraction + test_fraction < 1):
        raise ValueError("dev_fraction and test_fraction must be in [0, 1) and leave room for training")
    if sentences_per_shard < 1 or min_count < 1 or not (max_vocab == 0 or max_vocab > len(SPECIAL_TOKENS)):
        raise ValueError("sentences_per_shard and min_count must be positive, max_vocab 0 (no limit) or above 3")
    output_dir = Path(output_dir)
    refuse_writing_over_inputs(output_dir, (input_path, vocab_path))
    given_vocab = None
    if extend_vocab and vocab_path is None:
        raise ValueError("extend_vocab extends a given vocabulary: give vocab_path too")
    if rank_vocab and vocab_path is None:
        raise ValueError("rank_vocab ranks a given vocabulary (a vocabulary built from the text is ranked already): give vocab_path too")
    if vocab_path is not None:
        if max_vocab or (min_count != 1 and not extend_vocab):
            raise ValueError("min_count and max_vocab build a vocabulary: leave them out with a given vocabulary (min_count applies when extending it)")
        given_vocab = Vocabulary.from_file(vocab_path).tokens
    stats = CorpusStats()
    nlp = sentence_pipeline(lang)
    unique, seen = [], set()
    for tokens in tokenized_sentences(nlp, read_documents(input_path, stats, max_document_chars), stats):
        stats.sentences += 1
        line = " ".join(tokens)
        digest = hashlib.blake2b(line.encode("utf-8"), digest_size=16).digest()
        if digest in seen:
            stats.duplicate_sentences += 1
            continue
        seen.add(digest)
        unique.append(line)
    if not unique:
        raise ValueError(f"{input_path}: nothing to train on, no text found ({_dropped(stats)})")
    random.Random(seed).shuffle(unique)
    train, dev, test = _split(unique, dev_fraction, test_fraction)
    if not train:
        raise ValueError(
            f"{input_path}: nothing to train on, all {len(unique)} sentences go to dev and test: lower dev_fraction and test_fraction or give more text"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    marker = output_dir / PREPARING_MARK
    marker.write_text("spacy-elmo corpus: being written; a folder holding this file is not trained on\n", encoding="utf-8")
    _write_splits(output_dir, train, dev, test, sentences_per_shard)
    if given_vocab is None:
        vocab = build_vocab(train, min_count, max_vocab)
    else:
        vocab = vocab_from_given(given_vocab, train, min_count if extend_vocab else None, rank_vocab)
    Vocabulary(vocab).to_file(output_dir / VOCAB_FILE)
    stats = dataclasses.replace(
        stats,
        tokens=sum(len(line.split(" ")) for line in train),
        train_sentences=len(train),
        dev_sentences=len(dev),
        test_sentences=len(test),
        vocab_size=len(vocab),
    )
    (output_dir / "stats.json").write_text(json.dumps(dataclasses.asdict(stats), indent=2), encoding="utf-8")
    marker.unlink()
    return stats


def _dropped(stats: CorpusStats) -> str:
    """What reading left out, in words."""
    counts = {
        "documents tokenized": stats.documents,
        "empty documents dropped": stats.empty_documents_dropped,
        "control characters removed": stats.control_characters_removed,
        ".jsonl lines dropped for length": stats.jsonl_lines_dropped_for_length,
    }
    return ", ".join(f"{count} {what}" for what, count in counts.items() if count) or "the input is empty"


def _split(lines: List[str], dev_fraction: float, test_fraction: float) -> Tuple[List[str], List[str], List[str]]:
    """(train, dev, test): each held-out share is its fraction of the lines, rounded half up."""
    n_dev = math.floor(len(lines) * dev_fraction + 0.5)
    n_test = math.floor(len(lines) * test_fraction + 0.5)
    return lines[n_dev + n_test :], lines[:n_dev], lines[n_dev : n_dev + n_test]


def _write_splits(output_dir: Path, train: List[str], dev: List[str], test: List[str], per_shard: int) -> None:
    (output_dir / "train").mkdir(parents=True, exist_ok=True)
    for old in (output_dir / "train").glob("shard_*.txt"):
        old.unlink()
    for index, start in enumerate(range(0, len(train), per_shard)):
        shard = train[start : start + per_shard]
        (output_dir / "train" / f"shard_{index:05d}.txt").write_text("\n".join(shard) + "\n", encoding="utf-8")
    for name, lines in (("dev.txt", dev), ("test.txt", test)):
        (output_dir / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _token_counts(lines: Iterable[str]) -> Counter:
    """How often each token of the space-joined `lines` occurs, special tokens left out."""
    counts = Counter(token for line in lines for token in line.split(" "))
    for special in SPECIAL_TOKENS:
        counts.pop(special, None)
    return counts


def build_vocab(lines: Iterable[str], min_count: int = 1, max_size: int = 0) -> List[str]:
    """`<S>`, `</S>`, `<UNK>`, then tokens seen at least `min_count` times, most frequent
    first (ties in code-point order), at most `max_size` entries in all when positive."""
    vocab = list(SPECIAL_TOKENS) + _frequent_tokens(_token_counts(lines), min_count)
    return vocab[:max_size] if max_size else vocab


def _frequent_tokens(counts: Counter, min_count: int) -> List[str]:
    """The tokens counted at least `min_count` times, most frequent first (ties in
    code-point order)."""
    return sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))


def vocab_from_given(given: Sequence[str], lines: Iterable[str], add_min_count: Optional[int] = None, rank: bool = False) -> List[str]:
    """`given` (special tokens first), with `add_min_count` followed by the tokens of
    `lines` it lacks seen at least that often (most frequent first, ties in code-point
    order). With `rank`, the words after the special tokens are then ranked by their counts
    in `lines`, ties in the order above, so the words `lines` lacks close the list.

    The sampled softmax draws its negatives as if row ids ranked the words by frequency
    (`distinct_log_uniform`): in the order of the text a vocabulary came from, it draws
    the new text's frequent words as rarely as the old text had them."""
    words = [token for token in given if token not in SPECIAL_TOKENS]
    if add_min_count is None and not rank:
        return list(SPECIAL_TOKENS) + words
    counts = _token_counts(lines)
    if add_min_count is not None:
        known = set(given)
        words += [token for token in _frequent_tokens(counts, add_min_count) if token not in known]
    if rank:
        words.sort(key=lambda t: -counts[t])
    return list(SPECIAL_TOKENS) + words
