"""Cutting docs into the pieces the biLM reads: sentences, or overlapping windows."""

from typing import List, NamedTuple, Tuple

from spacy.tokens import Doc


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
