"""Output layers of the language model: full softmax, and sampled softmax for large vocabularies.

Both share one weight layout, (vocab, P) plus a bias, so a model trained with the sampled
head is evaluated exactly with the full one. The sampled head follows bilm-tf: negatives
drawn from a log-uniform (Zipfian) distribution over a vocabulary sorted by descending
frequency, logits corrected by the log of each id's expected count, and accidental hits
(a negative equal to the target) removed.
"""
import math

import torch
from torch import nn


EVAL_ROWS = 1024
"""Rows per chunk of an evaluation-time softmax."""


class FullSoftmax(nn.Module):
    """Exact softmax over the whole vocabulary."""

    def __init__(self, dim: int, vocab_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.weight, std=dim**-0.5)

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[0]

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """(n, P) -> (n, vocab) normalized log-probabilities."""
        return torch.log_softmax(torch.nn.functional.linear(hidden, self.weight, self.bias), dim=-1)

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(n, P), (n,) ids -> (n,) negative log-likelihoods. Without autograd, rows go in
        chunks so that evaluation never holds more than (EVAL_ROWS, vocab) logits."""
        if torch.is_grad_enabled() or len(hidden) <= EVAL_ROWS:
            return self._nll(hidden, targets)
        return torch.cat([self._nll(h, t) for h, t in zip(hidden.split(EVAL_ROWS), targets.split(EVAL_ROWS))])

    def _nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = torch.nn.functional.linear(hidden, self.weight, self.bias)
        return torch.nn.functional.cross_entropy(logits, targets, reduction="none")


def log_uniform_probabilities(vocab_size: int) -> torch.Tensor:
    """(vocab,) P(k) = log((k + 2) / (k + 1)) / log(vocab + 1): id 0 the most frequent."""
    k = torch.arange(vocab_size, dtype=torch.float64)
    return (torch.log1p(1.0 / (k + 1.0)) / math.log(vocab_size + 1.0)).float()


class SampledSoftmax(FullSoftmax):
    """Training loss over the target and `n_samples` log-uniform negatives; exact otherwise.

    In eval mode (or with `n_samples >= vocab`) `forward` is the full softmax, so reported
    perplexities are always exact.
    """

    def __init__(self, dim: int, vocab_size: int, n_samples: int) -> None:
        super().__init__(dim, vocab_size)
        if n_samples < 1:
            raise ValueError(f"n_samples must be positive, got {n_samples}")
        self.n_samples = n_samples
        self.register_buffer("sampling_probs", log_uniform_probabilities(vocab_size), persistent=False)

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(n, P), (n,) ids -> (n,) sampled-softmax losses in training, exact NLL in eval."""
        if not self.training or self.n_samples >= self.vocab_size:
            return super().forward(hidden, targets)
        samples = torch.multinomial(self.sampling_probs, self.n_samples, replacement=True)
        log_expected = torch.log(self.sampling_probs * self.n_samples)
        true_logits = (hidden * self.weight[targets]).sum(-1) + self.bias[targets] - log_expected[targets]
        sampled_logits = hidden @ self.weight[samples].t() + self.bias[samples] - log_expected[samples]
        sampled_logits = sampled_logits.masked_fill(samples.unsqueeze(0) == targets.unsqueeze(1), float("-inf"))
        logits = torch.cat([true_logits.unsqueeze(1), sampled_logits], dim=1)
        return -torch.log_softmax(logits, dim=1)[:, 0]
