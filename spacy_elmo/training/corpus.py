"""Corpus preparation for biLM pretraining, in the bilm-tf layout.

Text is tokenized with the same spaCy tokenizer that inference uses, split into
sentences, deduplicated, shuffled with a seed and split into train / dev / test. Output:
`train/shard_00000.txt ...`, `dev.txt`, `test.txt` (one sentence per line, tokens joined by
single spaces), `vocab.txt` (`<S>`, `</S>`, `<UNK>`, then training tokens by descending
count) and `stats.json`. The sentences are held in memory to be shuffled.
"""
import dataclasses
import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Tuple, Union

import spacy
import srsly
from spacy.language import Language
from spacy.tokens import DocBin

from ..nn.special_tokens import SPECIAL_TOKENS

MAX_CHARS_PER_PIECE = 100_000
"""Documents longer than this are tokenized in pieces cut at whitespace."""


@dataclass
class CorpusStats:
    documents: int = 0
    lines_with_invalid_utf8: int = 0
    sentences: int = 0
    duplicate_sentences: int = 0
    tokens: int = 0
    train_sentences: int = 0
    dev_sentences: int = 0
    test_sentences: int = 0
    vocab_size: int = 0


def read_documents(path: Union[str, Path], stats: CorpusStats) -> Iterator[str]:
    """Documents of a .txt file (one per line), a folder of .txt files, a .jsonl file with a
    `text` field, or a .spacy DocBin. Invalid UTF-8 is replaced and counted; blank lines skipped."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise ValueError(f"{path}: folder holds no .txt files")
        for file in files:
            yield from _text_lines(file, stats)
    elif not path.is_file():
        raise ValueError(f"{path}: input not found")
    elif path.suffix == ".spacy":
        for doc in DocBin().from_disk(path).get_docs(spacy.blank("xx").vocab):
            if doc.text.strip():
                yield doc.text
    elif path.suffix == ".jsonl":
        for number, record in enumerate(srsly.read_jsonl(path), start=1):
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f"{path} line {number}: expected an object with a string 'text' field")
            if record["text"].strip():
                yield record["text"]
    else:
        yield from _text_lines(path, stats)


def _text_lines(path: Path, stats: CorpusStats) -> Iterator[str]:
    with path.open("rb") as handle:
        for raw in handle:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                stats.lines_with_invalid_utf8 += 1
            if line.strip():
                yield line.strip()


def _pieces(text: str) -> Iterator[str]:
    """`text` cut at whitespace into pieces of at most about MAX_CHARS_PER_PIECE characters."""
    while len(text) > MAX_CHARS_PER_PIECE:
        cut = text.rfind(" ", 0, MAX_CHARS_PER_PIECE)
        cut = cut if cut > 0 else MAX_CHARS_PER_PIECE
        yield text[:cut]
        text = text[cut:].lstrip()
    if text:
        yield text


def tokenized_sentences(nlp: Language, documents: Iterable[str], stats: CorpusStats) -> Iterator[List[str]]:
    """Sentences as token lists; whitespace tokens dropped, whitespace inside a token removed."""

    def pieces() -> Iterator[str]:
        for document in documents:
            stats.documents += 1
            yield from _pieces(document)

    for doc in nlp.pipe(pieces(), batch_size=256):
        for sentence in doc.sents:
            tokens = ["".join(ch for ch in t.text if not ch.isspace()) for t in sentence if not t.is_space]
            tokens = [t for t in tokens if t]
            if tokens:
                yield tokens


def sentence_pipeline(lang: str) -> Language:
    """The language's tokenizer (as at inference) plus a rule-based sentencizer."""
    nlp = spacy.blank(lang)
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
) -> CorpusStats:
    """Prepare `input_path` into `output_dir`; returns (and writes) the statistics.

    `vocab_path`: use this vocab.txt (e.g. the model's that training will continue from)
    instead of building one from the training split; `min_count` and `max_vocab` then do not apply."""
    if not (0 <= dev_fraction < 1 and 0 <= test_fraction < 1 and dev_fraction + test_fraction < 1):
        raise ValueError("dev_fraction and test_fraction must be in [0, 1) and leave room for training")
    if sentences_per_shard < 1 or min_count < 1 or not (max_vocab == 0 or max_vocab > len(SPECIAL_TOKENS)):
        raise ValueError("sentences_per_shard and min_count must be positive, max_vocab 0 (no limit) or above 3")
    given_vocab = None
    if vocab_path is not None:
        if min_count != 1 or max_vocab:
            raise ValueError("min_count and max_vocab build a vocabulary: leave them out with a given vocabulary")
        from .data import Vocabulary  # data.py imports this module

        given_vocab = Vocabulary.from_file(vocab_path).tokens
    stats = CorpusStats()
    nlp = sentence_pipeline(lang)
    unique, seen = [], set()
    for tokens in tokenized_sentences(nlp, read_documents(input_path, stats), stats):
        stats.sentences += 1
        line = " ".join(tokens)
        digest = hashlib.blake2b(line.encode("utf-8"), digest_size=16).digest()
        if digest in seen:
            stats.duplicate_sentences += 1
            continue
        seen.add(digest)
        unique.append(line)
    if not unique:
        raise ValueError(f"{input_path}: no text found")
    random.Random(seed).shuffle(unique)
    train, dev, test = _split(unique, dev_fraction, test_fraction)
    output_dir = Path(output_dir)
    _write_splits(output_dir, train, dev, test, sentences_per_shard)
    vocab = given_vocab if given_vocab is not None else build_vocab(train, min_count, max_vocab)
    (output_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    stats = dataclasses.replace(
        stats,
        tokens=sum(len(line.split(" ")) for line in train),
        train_sentences=len(train),
        dev_sentences=len(dev),
        test_sentences=len(test),
        vocab_size=len(vocab),
    )
    (output_dir / "stats.json").write_text(json.dumps(dataclasses.asdict(stats), indent=2), encoding="utf-8")
    return stats


def _split(lines: List[str], dev_fraction: float, test_fraction: float) -> Tuple[List[str], List[str], List[str]]:
    n_dev = round(len(lines) * dev_fraction)
    n_test = round(len(lines) * test_fraction)
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


def build_vocab(lines: Iterable[str], min_count: int = 1, max_size: int = 0) -> List[str]:
    """`<S>`, `</S>`, `<UNK>`, then tokens seen at least `min_count` times, most frequent
    first (ties in code-point order), at most `max_size` entries in all when positive."""
    counts = Counter(token for line in lines for token in line.split(" "))
    for special in SPECIAL_TOKENS:
        counts.pop(special, None)
    ranked = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
    vocab = list(SPECIAL_TOKENS) + ranked
    return vocab[:max_size] if max_size else vocab
