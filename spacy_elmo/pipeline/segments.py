"""Cutting docs into biLM inputs and grouping them into length-sorted, token-budget batches."""

from typing import Callable, Iterator, List, NamedTuple, Sequence, Tuple, TypeVar

from spacy.tokens import Doc

T = TypeVar("T")


class Segment(NamedTuple):
    """A run of non-whitespace tokens of one doc that the biLM reads as one sentence.

    Only the vectors of `token_indices[keep_start:keep_end]` are kept; the tokens around
    them are context shared with the neighbouring window.
    """

    doc_index: int
    token_indices: List[int]
    keep_start: int
    keep_end: int


def windows(n_tokens: int, size: int, overlap: int) -> List[Tuple[int, int, int, int]]:
    """(start, end, keep_start, keep_end) of windows covering `n_tokens` tokens.

    Windows hold at most `size` tokens and overlap by at least `overlap`; each token is
    kept from the window in which it lies farther from the edge (the cut is at the middle
    of each overlap). The last window ends at the last token.
    """
    if n_tokens <= size:
        return [(0, n_tokens, 0, n_tokens)]
    if overlap == 0:
        return [(s, min(s + size, n_tokens), 0, min(size, n_tokens - s)) for s in range(0, n_tokens, size)]
    starts = list(range(0, n_tokens - size, size - overlap)) + [n_tokens - size]
    cuts = [0] + [(nxt + cur + size) // 2 for cur, nxt in zip(starts, starts[1:])] + [n_tokens]
    return [(s, s + size, cuts[k] - s, cuts[k + 1] - s) for k, s in enumerate(starts)]


def doc_segments(doc: Doc, doc_index: int, use_sentences: bool, window_size: int, window_overlap: int) -> List[Segment]:
    """Sentences when the doc has sentence boundaries and `use_sentences`, else the whole
    doc; any piece longer than `window_size` non-space tokens is cut into overlapping windows."""
    if use_sentences and doc.has_annotation("SENT_START"):
        spans = [(sent.start, sent.end) for sent in doc.sents]
    else:
        spans = [(0, len(doc))]
    segments = []
    for start, end in spans:
        tokens = [i for i in range(start, end) if not doc[i].is_space]
        for first, last, keep_start, keep_end in windows(len(tokens), window_size, window_overlap):
            if last > first:
                segments.append(Segment(doc_index, tokens[first:last], keep_start, keep_end))
    return segments


def token_budget_batches(items: Sequence[T], batch_tokens: int, length: Callable[[T], int]) -> Iterator[List[T]]:
    """Length-sorted batches whose padded size (rows * longest) stays within `batch_tokens`.

    A single item longer than the budget forms a batch of its own.
    """
    ordered = sorted(items, key=length, reverse=True)
    batch: List[T] = []
    for item in ordered:
        if batch and (len(batch) + 1) * length(batch[0]) > batch_tokens:
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch
