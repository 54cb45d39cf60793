"""The one token-budget batching rule, for pretraining, perplexity, the component and `dump`."""

from typing import Callable, Iterator, List, Sequence, TypeVar

T = TypeVar("T")


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
