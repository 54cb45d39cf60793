"""Softmax heads: exact full softmax, log-uniform sampling, sampled training, exact evaluation."""

import math

import pytest
import torch

from spacy_elmo.nn import softmax
from spacy_elmo.nn.softmax import (
    CHUNK_ROWS,
    FullSoftmax,
    MergedSoftmax,
    SampledLogSumExp,
    SampledSoftmax,
    accidental_hits,
    distinct_log_uniform,
    expected_counts,
    log_uniform_draws,
    log_uniform_probabilities,
)

CPU = torch.device("cpu")


def test_a_merged_softmax_scores_the_rows_outside_the_smaller_vocabulary_as_its_unknown_word():
    torch.manual_seed(0)
    head = FullSoftmax(4, 10)
    kept = [0, 1, 2, 7, 4]  # smaller vocabulary id -> row; id 2 its <UNK> (row 2)
    merged = MergedSoftmax(head, kept, unknown=2)
    n = CHUNK_ROWS + 5  # more than one chunk
    hidden, targets = torch.randn(n, 4), torch.randint(0, len(kept), (n,))
    probs = torch.softmax(hidden @ head.weight.t() + head.bias, dim=1)
    unknown = probs[:, [2, 3, 5, 6, 8, 9]].sum(dim=1)  # <UNK>'s row and every row not kept
    expected = torch.stack([-torch.log(unknown[i] if t == 2 else probs[i, kept[t]]) for i, t in enumerate(targets.tolist())])
    with torch.no_grad():
        torch.testing.assert_close(merged(hidden, targets), expected.detach(), atol=1e-5, rtol=1e-5)
    assert merged.weight is head.weight  # the trained head's own weights


def test_full_softmax_is_the_normalized_nll():
    torch.manual_seed(0)
    head = FullSoftmax(4, 10)
    hidden, targets = torch.randn(5, 4), torch.tensor([0, 3, 9, 3, 1])
    logits = hidden @ head.weight.t() + head.bias
    expected = torch.logsumexp(logits, dim=1) - logits[torch.arange(5), targets]
    torch.testing.assert_close(head(hidden, targets), expected)
    torch.testing.assert_close(head.log_probs(hidden).exp().sum(1), torch.ones(5))


def test_log_uniform_distribution():
    probs = log_uniform_probabilities(1000)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert probs[0].item() == pytest.approx(math.log(2) / math.log(1001), rel=1e-6)
    assert torch.all(probs[1:] < probs[:-1])


def test_a_head_started_at_log_uniform_predicts_the_zipf_distribution_from_zero_states():
    head = FullSoftmax(4, 1000)
    assert torch.all(head.bias == 0)
    head.start_at_log_uniform()
    predicted = head.log_probs(torch.zeros(2, 4)).exp()
    torch.testing.assert_close(predicted, log_uniform_probabilities(1000).expand(2, -1))
    assert predicted[0, 0] > 100 * predicted[0, -1]  # rank 1 against rank 1,000


def test_draws_follow_the_distribution():
    torch.manual_seed(0)
    drawn = log_uniform_draws(200000, 50, CPU)
    assert drawn.min().item() >= 0 and drawn.max().item() <= 49
    counts = torch.bincount(drawn, minlength=50).float() / 200000
    torch.testing.assert_close(counts[:5], log_uniform_probabilities(50)[:5], atol=3e-3, rtol=0)


def test_negatives_are_distinct_and_count_their_draws():
    torch.manual_seed(0)
    ids, tries = distinct_log_uniform(30, 40, CPU)
    assert len(ids) == 30 and len(set(ids.tolist())) == 30
    assert tries >= 30
    with pytest.raises(ValueError, match="41 distinct ids from a vocabulary of 40"):
        distinct_log_uniform(41, 40, CPU)


def test_expected_counts_match_how_often_each_id_is_drawn():
    torch.manual_seed(0)
    vocab, n, trials = 100, 20, 4000
    probs = log_uniform_probabilities(vocab)
    included, expected = torch.zeros(vocab), torch.zeros(vocab)
    for _ in range(trials):
        ids, tries = distinct_log_uniform(n, vocab, CPU)
        included[ids] += 1
        expected += expected_counts(probs, n, tries)
    torch.testing.assert_close(included / trials, expected / trials, atol=0.025, rtol=0)


def test_expected_counts_without_repeats_are_n_times_p():
    probs = log_uniform_probabilities(10)
    torch.testing.assert_close(expected_counts(probs, 3, 3), 3 * probs)
    torch.testing.assert_close(expected_counts(probs, 3, 5), 1 - (1 - probs) ** 5)


def test_eval_mode_is_exact_and_training_mode_samples():
    torch.manual_seed(1)
    head = SampledSoftmax(8, 200, n_samples=16)
    hidden, targets = torch.randn(6, 8), torch.randint(0, 200, (6,))
    head.eval()
    torch.testing.assert_close(head(hidden, targets), FullSoftmax.forward(head, hidden, targets))
    head.train()
    sampled = head(hidden, targets)
    assert sampled.shape == (6,) and torch.all(torch.isfinite(sampled))
    assert not torch.allclose(sampled, FullSoftmax.forward(head, hidden, targets))


def test_accidental_hits_are_removed(monkeypatch):
    head = SampledSoftmax(2, 5, n_samples=2).train()
    monkeypatch.setattr(softmax, "distinct_log_uniform", lambda n, vocab, device: (torch.tensor([2, 4]), 3))
    hidden, targets = torch.zeros(1, 2), torch.tensor([2])
    with torch.no_grad():
        head.bias.zero_()
    # only id 4 remains a negative; all logits equal before the log-Q correction
    log_q = torch.log(1 - (1 - head.sampling_probs) ** 3)
    expected = -torch.log_softmax(torch.stack([-log_q[2], -log_q[4]]), dim=0)[0]
    torch.testing.assert_close(head(hidden, targets)[0], expected)


def test_training_with_sampled_softmax_lowers_the_exact_loss():
    torch.manual_seed(2)
    vocab, dim = 300, 16
    head = SampledSoftmax(dim, vocab, n_samples=40)
    contexts = torch.randn(64, dim)
    targets = torch.randint(0, 20, (64,))  # frequent ids, as in real text
    optimizer = torch.optim.Adam(head.parameters(), lr=0.05)
    head.eval()
    before = head(contexts, targets).mean().item()
    head.train()
    for _ in range(100):
        optimizer.zero_grad()
        head(contexts, targets).mean().backward()
        optimizer.step()
    head.eval()
    assert head(contexts, targets).mean().item() < 0.5 * before


def test_evaluation_softmax_in_chunks_equals_the_whole():
    torch.manual_seed(0)
    head = FullSoftmax(8, 50)
    hidden, targets = torch.randn(2 * CHUNK_ROWS + 7, 8), torch.randint(0, 50, (2 * CHUNK_ROWS + 7,))
    whole = head(hidden, targets)  # autograd on: one product
    with torch.no_grad():
        chunked = head(hidden, targets)
    torch.testing.assert_close(chunked, whole.detach())


def test_full_softmax_under_cpu_bf16_autocast_runs_one_shape_and_matches_fp32(monkeypatch):
    """Under CPU bf16 autocast the rows go in chunks of CHUNK_ROWS, the last one padded, so
    every product has one shape; losses and gradients are those of the plain fp32 softmax
    up to bf16 rounding, and the padding rows get no gradient."""
    torch.manual_seed(0)
    head = FullSoftmax(8, 50)
    n = CHUNK_ROWS + 7
    hidden, targets = torch.randn(n, 8, requires_grad=True), torch.randint(0, 50, (n,))
    shapes = []
    plain_nll = FullSoftmax._nll
    monkeypatch.setattr(FullSoftmax, "_nll", lambda self, h, t: shapes.append(tuple(h.shape)) or plain_nll(self, h, t))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = head(hidden, targets)
    assert shapes == [(CHUNK_ROWS, 8), (CHUNK_ROWS, 8)]
    losses.sum().backward()
    reference_hidden = hidden.detach().clone().requires_grad_(True)
    reference = torch.nn.functional.cross_entropy(reference_hidden @ head.weight.t() + head.bias, targets, reduction="none")
    weight_grad = head.weight.grad.clone()
    head.weight.grad = None
    reference.sum().backward()
    assert losses.shape == (n,)
    torch.testing.assert_close(losses.float(), reference.detach(), rtol=0.02, atol=0.02)
    torch.testing.assert_close(hidden.grad, reference_hidden.grad, rtol=0.05, atol=0.01)
    torch.testing.assert_close(weight_grad, head.weight.grad, rtol=0.05, atol=0.05)


def plain_sampled_losses(head: SampledSoftmax, hidden, targets, samples, tries):
    """The sampled loss in plain autograd ops (bilm-tf's formulation), as the reference."""
    log_q = torch.log(expected_counts(head.sampling_probs.to(hidden.dtype), head.n_samples, tries))
    true = (hidden * head.weight[targets]).sum(-1) + head.bias[targets] - log_q[targets]
    sampled = hidden @ head.weight[samples].t() + head.bias[samples] - log_q[samples]
    sampled = sampled.masked_fill(samples.unsqueeze(0) == targets.unsqueeze(1), float("-inf"))
    return -torch.log_softmax(torch.cat([true.unsqueeze(1), sampled], 1), 1)[:, 0]


def test_sampled_loss_and_gradients_equal_the_plain_formulation(monkeypatch):
    torch.manual_seed(3)
    head = SampledSoftmax(6, 40, n_samples=12).double().train()
    samples = torch.randperm(40)[:12]
    monkeypatch.setattr(softmax, "distinct_log_uniform", lambda n, vocab, device: (samples, 17))
    hidden = torch.randn(9, 6, dtype=torch.float64, requires_grad=True)
    targets = torch.cat([samples[:4], torch.randint(0, 40, (5,))])  # four accidental hits at least
    weights = torch.arange(1.0, 10.0, dtype=torch.float64)
    results = []
    for losses in (head(hidden, targets), plain_sampled_losses(head, hidden, targets, samples, 17)):
        grads = torch.autograd.grad((losses * weights).sum(), (hidden, head.weight, head.bias))
        results.append((losses.detach(), *grads))
    for fast, plain in zip(*results):
        torch.testing.assert_close(fast, plain)


def test_sampled_logsumexp_gradients_match_finite_differences():
    torch.manual_seed(4)
    inputs = [torch.randn(5, 3, dtype=torch.float64), torch.randn(7, 3, dtype=torch.float64), torch.randn(7, dtype=torch.float64)]
    rows, columns = torch.tensor([0, 3]), torch.tensor([2, 6])
    row_weights = torch.randn(5, dtype=torch.float64)

    def objective(*tensors):
        return (SampledLogSumExp.apply(*tensors, rows, columns) * row_weights).sum()

    leaves = [tensor.clone().requires_grad_() for tensor in inputs]
    analytic = torch.autograd.grad(objective(*leaves), leaves)  # one backward: its buffer is reused
    step = 1e-6
    for which, tensor in enumerate(inputs):
        numeric = torch.zeros_like(tensor)
        for index in range(tensor.numel()):
            shifted = [t.clone() for t in inputs]
            shifted[which].view(-1)[index] += step
            above = objective(*shifted)
            shifted[which].view(-1)[index] -= 2 * step
            numeric.view(-1)[index] = (above - objective(*shifted)) / (2 * step)
        torch.testing.assert_close(analytic[which], numeric, atol=1e-7, rtol=1e-6)


def test_accidental_hits_locate_each_target_among_the_samples():
    rows, columns = accidental_hits(torch.tensor([7, 2, 9]), torch.tensor([2, 5, 9, 2]), vocab_size=10)
    assert rows.tolist() == [0, 2, 3] and columns.tolist() == [1, 2, 1]


def test_a_row_whose_only_negative_is_its_target_has_zero_loss_and_gradient(monkeypatch):
    head = SampledSoftmax(2, 5, n_samples=1).train()
    monkeypatch.setattr(softmax, "distinct_log_uniform", lambda n, vocab, device: (torch.tensor([3]), 1))
    hidden = torch.randn(2, 2, requires_grad=True)
    losses = head(hidden, torch.tensor([3, 1]))
    losses.sum().backward()
    assert losses[0].item() == 0.0 and torch.isfinite(losses[1]) and losses[1].item() > 0
    assert torch.all(torch.isfinite(hidden.grad)) and torch.all(hidden.grad[0] == 0)
    # the function on its own: a row with no negative left is -inf, and any gradient into it is dropped
    weight = torch.randn(1, 2, requires_grad=True)
    logsumexp = SampledLogSumExp.apply(hidden, weight, torch.zeros(1), torch.tensor([0]), torch.tensor([0]))
    assert logsumexp[0].item() == float("-inf") and torch.isfinite(logsumexp[1])
    (logsumexp * torch.tensor([10.0, 1.0])).sum().backward()
    assert torch.all(torch.isfinite(weight.grad)) and torch.all(torch.isfinite(hidden.grad))


def test_sampled_loss_under_bf16_autocast_stays_near_fp32(monkeypatch):
    torch.manual_seed(5)
    head = SampledSoftmax(64, 2000, n_samples=256).train()
    samples, tries = distinct_log_uniform(256, 2000, CPU)
    monkeypatch.setattr(softmax, "distinct_log_uniform", lambda n, vocab, device: (samples, tries))
    hidden, targets = torch.randn(128, 64), torch.randint(0, 2000, (128,))
    exact = head(hidden, targets)
    for inputs in (hidden, hidden.bfloat16()):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            approximate = head(inputs, targets)
        assert approximate.dtype == torch.float32
        # bf16 keeps 8 mantissa bits: logits of size ~10 are off by ~0.05 at most
        torch.testing.assert_close(approximate, exact, atol=0.1, rtol=0.02)
