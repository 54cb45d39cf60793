"""Exact (fully normalized) perplexity of a biLM over tokenized sentences."""

import math
from typing import Dict, NamedTuple, Sequence

import torch

from ..batching import token_budget_batches
from ..nn.objective import BiLMObjective
from ..nn.softmax import MergedSoftmax
from ..nn.special_tokens import UNK_ID
from .data import Sentence, Vocabulary, to_tensors


class NLLSums(NamedTuple):
    """Summed negative log-likelihoods (nats); partial sums of processes add up."""

    forward: float
    backward: float
    predictions: int
    """Per direction: tokens plus one sentence boundary per sentence."""


class Perplexity(NamedTuple):
    forward: float
    backward: float
    mean: float
    """exp of the mean of both directions' per-token NLL (bilm-tf's reported figure)."""
    predictions: int

    @classmethod
    def from_sums(cls, sums: NLLSums) -> "Perplexity":
        n = sums.predictions
        return cls(perplexity_of(sums.forward / n), perplexity_of(sums.backward / n), perplexity_of((sums.forward + sums.backward) / (2 * n)), n)

    def as_dict(self, prefix: str = "") -> Dict[str, float]:
        return {f"{prefix}{name}": value for name, value in self._asdict().items()}


MAX_LOG_PERPLEXITY = 700.0
"""Mean NLLs above this give exp(700), about 1e304: finite, so JSON stays standard."""


def perplexity_of(mean_nll: float) -> float:
    """exp(mean_nll), capped at exp(MAX_LOG_PERPLEXITY) for a diverged model (no
    OverflowError, no inf written to JSON as the non-standard `Infinity`)."""
    return math.exp(min(mean_nll, MAX_LOG_PERPLEXITY))


def nll_sums(
    objective: BiLMObjective,
    sentences: Sequence[Sentence],
    vocab: Vocabulary,
    tokens_per_batch: int = 4096,
    device: torch.device = torch.device("cpu"),
) -> NLLSums:
    """Both directions' NLL over `sentences` with the full softmax, whatever head trained
    the model, in fp32 (the objective is put in eval mode for the call)."""
    was_training = objective.training
    objective.eval()
    forward = backward = 0.0
    predictions = 0
    try:
        with torch.no_grad():
            for batch in token_budget_batches(sentences, tokens_per_batch, length=len):
                tensors = to_tensors(batch, vocab, objective.bilm)
                result = objective(*(t.to(device) for t in tensors))
                forward += float(result.forward_nll)
                backward += float(result.backward_nll)
                predictions += result.predictions
    finally:
        objective.train(was_training)
    return NLLSums(forward, backward, predictions)


def perplexity(
    objective: BiLMObjective,
    sentences: Sequence[Sentence],
    vocab: Vocabulary,
    tokens_per_batch: int = 4096,
    device: torch.device = torch.device("cpu"),
) -> Perplexity:
    """Exact forward, backward and mean perplexity over `sentences`."""
    if not sentences:
        raise ValueError("no sentences to evaluate on")
    return Perplexity.from_sums(nll_sums(objective, sentences, vocab, tokens_per_batch, device))


def at_vocabulary(objective: BiLMObjective, model_vocab: Vocabulary, vocab: Vocabulary) -> BiLMObjective:
    """The trained `objective` scoring at `vocab`, a part of `model_vocab` (the vocabulary
    a model's was extended from, say): its other words count as `<UNK>`, so that the
    perplexity compares with that of a model trained at `vocab`. Shares the weights."""
    missing = [token for token in vocab.tokens if token not in model_vocab.index]
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise ValueError(f"the vocabulary to score at holds {len(missing)} word(s) the model's lacks ({shown}): it gives them no probability of their own")
    head = MergedSoftmax(objective.head, [model_vocab.index[token] for token in vocab.tokens], UNK_ID)
    return BiLMObjective(objective.bilm, head)
