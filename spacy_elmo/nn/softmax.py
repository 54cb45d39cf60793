"""Output layers of the language model: full softmax, and sampled softmax for large vocabularies.

Both share one weight layout, (vocab, P) plus a bias, so a model trained with the sampled
head is evaluated exactly with the full one. The sampled head follows bilm-tf, which uses
TensorFlow's `sampled_softmax_loss` with its default sampler: distinct negatives drawn from
a log-uniform (Zipfian) distribution over a vocabulary sorted by descending frequency, one
set per batch, logits corrected by the log of each id's expected count, and accidental hits
(a negative equal to the target) removed.
"""

import math
from typing import Sequence, Tuple

import torch
from torch import nn

from .shapes import pad_rows, product_rows, rounded_rows, rounding_pays

CHUNK_ROWS = 1024
"""Rows per chunk of a full softmax in evaluation and in CPU bf16 training."""


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

    def start_at_log_uniform(self) -> None:
        """Set the bias to `log_uniform_probabilities`: with zero scores from the hidden
        states, the head then predicts the Zipf distribution by frequency rank."""
        with torch.no_grad():
            self.bias.copy_(torch.log(log_uniform_probabilities(self.vocab_size)).to(self.bias))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(n, P) -> (n, vocab) unnormalized scores."""
        return torch.nn.functional.linear(hidden, self.weight, self.bias)

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """(n, P) -> (n, vocab) normalized log-probabilities."""
        return torch.log_softmax(self.logits(hidden), dim=-1)

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(n, P), (n,) ids -> (n,) negative log-likelihoods. Rows go in chunks of
        CHUNK_ROWS without autograd, so that evaluation never holds more than (CHUNK_ROWS,
        vocab) logits, and under CPU bf16 autocast, with the last chunk padded so that every
        product has one shape (oneDNN compiles a kernel for each new shape, `shapes`): with a
        53k vocabulary a step then ran 1.19 times as fast as over (n, vocab) at once."""
        n = len(hidden)
        if rounding_pays(hidden.device):
            rows = rounded_rows(n, CHUNK_ROWS)
            hidden, targets = pad_rows(hidden, rows), pad_rows(targets, rows)
        elif torch.is_grad_enabled() or n <= CHUNK_ROWS:
            return self._nll(hidden, targets)
        chunks = zip(hidden.split(CHUNK_ROWS), targets.split(CHUNK_ROWS))
        return torch.cat([self._nll(h, t) for h, t in chunks])[:n]

    def _nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.logits(hidden), targets, reduction="none")


class MergedSoftmax(FullSoftmax):
    """A trained full softmax read at a smaller vocabulary, for exact perplexities that
    compare with a model trained at that vocabulary: `kept[i]` is the row of the smaller
    vocabulary's id i, and the probabilities of all other rows add up to the probability
    of its `<UNK>`, id `unknown` (whose row is `kept[unknown]`). Shares `head`'s weights."""

    kept: torch.Tensor
    merged: torch.Tensor

    def __init__(self, head: FullSoftmax, kept: Sequence[int], unknown: int) -> None:
        nn.Module.__init__(self)
        self.weight, self.bias = head.weight, head.bias
        kept_rows = torch.as_tensor(list(kept), dtype=torch.long)
        merged = torch.ones(head.vocab_size, dtype=torch.bool)
        merged[kept_rows] = False
        merged[kept_rows[unknown]] = True
        self.register_buffer("kept", kept_rows, persistent=False)
        self.register_buffer("merged", merged, persistent=False)
        self.unknown = unknown

    @property
    def vocab_size(self) -> int:
        """The smaller vocabulary's size (the ids `forward` takes)."""
        return len(self.kept)

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(n, P), (n,) ids of the smaller vocabulary -> (n,) negative log-likelihoods, in
        chunks of CHUNK_ROWS rows."""
        return torch.cat([self._nll(h, t) for h, t in zip(hidden.split(CHUNK_ROWS), targets.split(CHUNK_ROWS))])

    def _nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        log_probs = self.log_probs(hidden)
        picked = log_probs.gather(1, self.kept[targets].unsqueeze(1)).squeeze(1)
        unknown = torch.logsumexp(log_probs[:, self.merged], dim=1)
        return -torch.where(targets == self.unknown, unknown, picked)


def log_uniform_probabilities(vocab_size: int) -> torch.Tensor:
    """(vocab,) P(k) = log((k + 2) / (k + 1)) / log(vocab + 1): id 0 the most frequent."""
    k = torch.arange(vocab_size, dtype=torch.float64)
    return (torch.log1p(1.0 / (k + 1.0)) / math.log(vocab_size + 1.0)).float()


def log_uniform_draws(count: int, vocab_size: int, device: torch.device) -> torch.Tensor:
    """(count,) independent ids from `log_uniform_probabilities(vocab_size)`, by its inverse CDF."""
    uniform = torch.rand(count, dtype=torch.float64, device=device)
    ids = torch.floor(torch.exp(uniform * math.log(vocab_size + 1.0))).long() - 1
    return ids.clamp_(0, vocab_size - 1)


def distinct_log_uniform(n: int, vocab_size: int, device: torch.device) -> Tuple[torch.Tensor, int]:
    """n distinct log-uniform ids, and how many draws it took to see them (n <= tries).

    TensorFlow's `log_uniform_candidate_sampler(unique=True)`: draw with replacement, keep
    each id's first appearance, stop at the n-th distinct id.
    """
    if not 0 < n <= vocab_size:
        raise ValueError(f"cannot draw {n} distinct ids from a vocabulary of {vocab_size}")
    draws = log_uniform_draws(2 * n, vocab_size, device)
    while True:
        distinct, inverse = torch.unique(draws, return_inverse=True)
        if len(distinct) >= n:
            break
        draws = torch.cat([draws, log_uniform_draws(len(draws), vocab_size, device)])
    positions = torch.arange(len(draws), device=device)
    first_seen = torch.full((len(distinct),), len(draws), device=device).scatter_reduce_(0, inverse, positions, "amin")
    kept = first_seen.sort().values[:n]
    return draws[kept], int(kept[-1]) + 1


def expected_counts(probs: torch.Tensor, n: int, tries: int) -> torch.Tensor:
    """Expected number of times each id is among n distinct samples drawn in `tries` draws
    (TensorFlow's rule: n * p when no draw repeated, else 1 - (1 - p) ** tries)."""
    if tries == n:
        return probs * n
    return -torch.expm1(tries * torch.log1p(-probs))


class SampledSoftmax(FullSoftmax):
    """Training loss over the target and `n_samples` distinct log-uniform negatives; exact otherwise.

    In eval mode (or with `n_samples >= vocab`) `forward` is the full softmax, so reported
    perplexities are always exact.
    """

    sampling_probs: torch.Tensor
    """(vocab_size,) the log-uniform sampling distribution."""

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
        samples, tries = distinct_log_uniform(self.n_samples, self.vocab_size, hidden.device)
        log_expected = torch.log(expected_counts(self.sampling_probs, self.n_samples, tries))
        corrected_bias = self.bias - log_expected  # (vocab,) the bias less each id's log expected count
        # one gather of the targets' and the negatives' rows: one dense gradient of the table
        ids = torch.cat([targets, samples])
        true_weight, sampled_weight = self.weight[ids].split([len(targets), len(samples)])
        true_bias, sampled_bias = corrected_bias[ids].split([len(targets), len(samples)])
        true_logits = (hidden * true_weight).sum(-1) + true_bias
        hit_rows, hit_columns = accidental_hits(samples, targets, self.vocab_size)
        sampled = SampledLogSumExp.apply(hidden, sampled_weight, sampled_bias, hit_rows, hit_columns)
        # -log(e^true / (e^true + e^sampled)), exact where the loss is tiny, 0 with no negative
        return torch.nn.functional.softplus(sampled - true_logits)


def accidental_hits(samples: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(S,) distinct ids, (n,) targets -> (rows, columns) where samples[column] == targets[row]."""
    column_of = torch.full((vocab_size,), -1, dtype=torch.long, device=samples.device)
    column_of[samples] = torch.arange(len(samples), device=samples.device)
    columns = column_of[targets]
    rows = (columns >= 0).nonzero().squeeze(1)
    return rows, columns[rows]


class SampledLogSumExp(torch.autograd.Function):
    """logsumexp over the negatives' logits, in place on one (n, S) buffer.

    forward(hidden (n, P), weight (S, P), bias (S,), hit_rows (h,), hit_columns (h,)) -> (n,):
    log sum_s exp(hidden @ weight[s] + bias[s]) in fp32, leaving out the (row, column) pairs
    of the accidental hits (a row with no negative left gives -inf). The plain autograd form
    (matmul, bias, mask, concatenate, log_softmax) makes some fifteen passes over the (n, S)
    logits; this one computes them once, turns them into unnormalized probabilities in place
    and keeps those for the backward pass, which may run once (a second fails autograd's
    version check). Under autocast the product runs in the autocast dtype, everything after
    it (bias, sums, and the backward products) in fp32.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, hit_rows, hit_columns):
        rows = product_rows(len(hidden), hidden.device)  # a recurring row count (`shapes`)
        product = (pad_rows(hidden, rows) @ weight.t())[: len(hidden)]
        logits = product.to(torch.promote_types(product.dtype, torch.float32)).add_(bias)
        logits[hit_rows, hit_columns] = float("-inf")
        top = logits.amax(1, keepdim=True).clamp_min(torch.finfo(logits.dtype).min)
        probs = logits.sub_(top).exp_()
        total = probs.sum(1)
        ctx.save_for_backward(hidden, weight, probs, total)
        ctx.bias_dtype = bias.dtype
        return total.log() + top.squeeze(1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        hidden, weight, probs, total = ctx.saved_tensors
        # d logsumexp / d logit = softmax; a row whose every negative is a hit has total 0
        scale = torch.where(total > 0, grad.to(probs.dtype) / total, 0.0)
        softmax_grad = probs.mul_(scale.unsqueeze(1))
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        grad_hidden = (softmax_grad @ weight.to(probs.dtype)).to(hidden.dtype) if needs_hidden else None
        grad_weight = (softmax_grad.t() @ hidden.to(probs.dtype)).to(weight.dtype) if needs_weight else None
        grad_bias = softmax_grad.sum(0).to(ctx.bias_dtype) if needs_bias else None
        return grad_hidden, grad_weight, grad_bias, None, None
