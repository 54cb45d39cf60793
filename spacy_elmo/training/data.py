"""Training data: the vocabulary, sentences of a prepared corpus, and reproducible
length-bucketed batches with a resumable position.

A batch is a list of sentences whose padded size (rows x longest row) stays within a
token budget. The batches of a shard depend only on the seed, the epoch and the shard, so
a run resumed at a `DataPosition` sees exactly the batches the uninterrupted run saw.
"""

from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy
import torch

from ..batching import token_budget_batches
from ..nn.bilm import BiLM
from ..nn.special_tokens import SPECIAL_TOKENS, UNK_ID

VOCAB_FILE = "vocab.txt"
"""The vocabulary's file name, in a corpus folder and in a trained model's folder."""
PREPARING_MARK = ".preparing"
"""A file the corpus command puts in a corpus folder before it changes anything there and
removes once every file is written: a folder holding it was left part-way (Ctrl-C, a full
disk), with new shards beside old dev and test sentences, and is not trained on."""

Sentence = List[str]


class Vocabulary:
    """A `vocab.txt`: `<S>`, `</S>`, `<UNK>`, then tokens by descending frequency."""

    def __init__(self, tokens: Sequence[str]) -> None:
        if tuple(tokens[:3]) != SPECIAL_TOKENS:
            raise ValueError(f"a vocabulary must start with {SPECIAL_TOKENS}, got {tuple(tokens[:3])}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("the vocabulary lists a token twice")
        self.tokens = list(tokens)
        self.index: Dict[str, int] = {token: i for i, token in enumerate(tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "Vocabulary":
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{path}: vocabulary file not found")
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: {not_utf8(err)}") from err
        if lines and lines[-1] == "":
            lines.pop()
        try:
            return cls(lines)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err

    def to_file(self, path: Union[str, Path]) -> None:
        Path(path).write_text("".join(token + "\n" for token in self.tokens), encoding="utf-8")

    def ids(self, tokens: Sequence[str]) -> List[int]:
        return [self.index.get(token, UNK_ID) for token in tokens]


def read_sentences(path: Union[str, Path], max_tokens: int) -> List[Sentence]:
    """One sentence per line, tokens separated by single spaces; blank lines skipped and
    sentences longer than `max_tokens` cut into consecutive pieces."""
    sentences = []
    with Path(path).open(encoding="utf-8") as handle:
        try:
            for line in handle:
                tokens = line.split()
                for start in range(0, len(tokens), max_tokens):
                    sentences.append(tokens[start : start + max_tokens])
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: {not_utf8(err)}") from err
    return sentences


def not_utf8(err: UnicodeDecodeError) -> str:
    """What a text file that fails to decode is, for an error that names the file."""
    return f"not UTF-8 text ({err.reason})"


def train_shards(corpus_dir: Union[str, Path]) -> List[Path]:
    """The training shards of a prepared corpus; a ValueError for a folder the corpus
    command left part-way or never wrote."""
    if (Path(corpus_dir) / PREPARING_MARK).exists():
        raise ValueError(f"{corpus_dir}: its preparation stopped part-way (it holds {PREPARING_MARK}): run the corpus command again")
    shards = sorted((Path(corpus_dir) / "train").glob("shard_*.txt"))
    if not shards:
        raise ValueError(f"{corpus_dir}: no train/shard_*.txt files (run the corpus command first)")
    return shards


def bucketed_batches(sentences: Sequence[Sentence], tokens_per_batch: int, bucket_batches: int, generator: torch.Generator) -> List[List[Sentence]]:
    """Shuffle, sort by length within chunks of about `bucket_batches` batches' worth of
    tokens, cut into budget batches, and shuffle the batches."""
    order = torch.randperm(len(sentences), generator=generator).tolist()
    chunk_tokens = tokens_per_batch * bucket_batches
    batches: List[List[Sentence]] = []
    chunk: List[Sentence] = []
    size = 0
    for index in order + [None]:
        if index is not None:
            chunk.append(sentences[index])
            size += len(sentences[index])
        if chunk and (size >= chunk_tokens or index is None):
            batches += token_budget_batches(chunk, tokens_per_batch, length=len)
            chunk, size = [], 0
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


class DataPosition(NamedTuple):
    """Where the next batch comes from: epoch, index into the epoch's shard order, batch
    index within that shard."""

    epoch: int = 0
    shard: int = 0
    batch: int = 0


class BatchStream:
    """Endless, reproducible batches over the training shards, from a `DataPosition`.

    Epoch e visits the shards in an order drawn from (seed, e); shard s of epoch e is
    batched with a generator seeded from (seed, e, s). Only one shard is in memory.
    """

    def __init__(
        self,
        shards: Sequence[Path],
        tokens_per_batch: int,
        max_sentence_tokens: int,
        bucket_batches: int,
        seed: int,
        position: DataPosition = DataPosition(),
    ) -> None:
        self.shards = list(shards)
        self.tokens_per_batch = tokens_per_batch
        self.max_sentence_tokens = max_sentence_tokens
        self.bucket_batches = bucket_batches
        self.seed = seed
        self.position = position
        self._loaded: Optional[Tuple[int, int]] = None
        self._batches: List[List[Sentence]] = []

    def __iter__(self) -> Iterator[List[Sentence]]:
        return self

    def __next__(self) -> List[Sentence]:
        """The batch at `position`; `position` then points past it."""
        epoch, shard, index = self._settle()
        self.position = DataPosition(epoch, shard, index + 1)
        return self._shard_batches(epoch, shard)[index]

    def upcoming_epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._settle().epoch

    def _settle(self) -> DataPosition:
        """Move `position` past exhausted shards onto the next batch that exists."""
        for _ in range(2 * len(self.shards) + 1):  # may cross one epoch boundary past empty shards
            epoch, shard, index = self.position
            if index < len(self._shard_batches(epoch, shard)):
                return self.position
            last_shard = shard + 1 >= len(self.shards)
            self.position = DataPosition(epoch + 1, 0, 0) if last_shard else DataPosition(epoch, shard + 1, 0)
        raise ValueError("the training shards hold no sentences")

    def _shard_batches(self, epoch: int, shard: int) -> List[List[Sentence]]:
        if self._loaded != (epoch, shard):
            order = torch.randperm(len(self.shards), generator=_generator(self.seed, epoch)).tolist()
            sentences = read_sentences(self.shards[order[shard]], self.max_sentence_tokens)
            generator = _generator(self.seed, epoch, shard + 1)
            self._batches = bucketed_batches(sentences, self.tokens_per_batch, self.bucket_batches, generator)
            self._loaded = (epoch, shard)
        return self._batches


def _generator(*numbers: int) -> torch.Generator:
    seed = 0
    for number in numbers:
        seed = (seed * 1_000_003 + number) % (2**63)
    return torch.Generator().manual_seed(seed)


class TensorBatch(NamedTuple):
    input_ids: torch.Tensor  # (batch, time, *id_shape) int64: what the biLM reads (`BiLM.input_ids`)
    lengths: torch.Tensor  # (batch,) int64
    token_ids: torch.Tensor  # (batch, time) int64 softmax targets, UNK_ID past each length


def to_tensors(sentences: Sequence[Sentence], vocab: Vocabulary, bilm: BiLM) -> TensorBatch:
    """The biLM's input ids and the softmax vocabulary's target ids of non-empty sentences."""
    lengths = [len(s) for s in sentences]
    token_ids = numpy.full((len(sentences), max(lengths)), UNK_ID, dtype=numpy.int64)
    for row, sentence in enumerate(sentences):
        token_ids[row, : len(sentence)] = vocab.ids(sentence)
    return TensorBatch(bilm.input_ids(sentences), torch.tensor(lengths, dtype=torch.long), torch.from_numpy(token_ids))
