"""Cutting docs into biLM inputs and grouping them into length-sorted, token-budget batches."""
from typing import Iterator, List, NamedTuple, Sequence

from spacy.tokens import Doc


class Segment(NamedTuple):
    """A run of non-whitespace tokens of one doc that the biLM reads as one sentence."""

    doc_index: int
    token_indices: List[int]


def doc_segments(doc: Doc, doc_index: int, use_sentences: bool, window_size: int) -> List[Segment]:
    """Sentences when the doc has sentence boundaries and `use_sentences`, else windows;
    any piece longer than `window_size` non-space tokens is cut into windows."""
    if use_sentences and doc.has_annotation("SENT_START"):
        spans = [(sent.start, sent.end) for sent in doc.sents]
    else:
        spans = [(0, len(doc))]
    segments = []
    for start, end in spans:
        tokens = [i for i in range(start, end) if not doc[i].is_space]
        for offset in range(0, len(tokens), window_size):
            segments.append(Segment(doc_index, tokens[offset : offset + window_size]))
    return segments


def token_budget_batches(segments: Sequence[Segment], batch_tokens: int) -> Iterator[List[Segment]]:
    """Length-sorted batches whose padded size (rows * longest) stays within `batch_tokens`.

    A single segment longer than the budget forms a batch of its own.
    """
    ordered = sorted(segments, key=lambda s: len(s.token_indices), reverse=True)
    batch: List[Segment] = []
    for segment in ordered:
        longest = len(batch[0].token_indices) if batch else len(segment.token_indices)
        if batch and (len(batch) + 1) * longest > batch_tokens:
            yield batch
            batch = []
        batch.append(segment)
    if batch:
        yield batch
