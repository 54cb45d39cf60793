"""The biLM objective: the right states predict the right tokens, exactly, and it trains."""

import math

import pytest
import torch

from elmo_testing import random_bilm
from spacy_elmo.nn import batch_to_char_ids
from spacy_elmo.nn.objective import BiLMObjective
from spacy_elmo.nn.softmax import FullSoftmax
from spacy_elmo.nn.special_tokens import BOS_ID, EOS_ID

SENTENCES = [["the", "bank", "of", "the", "river"], ["cash", "!"]]
VOCAB = {"<S>": 0, "</S>": 1, "<UNK>": 2, "the": 3, "bank": 4, "of": 5, "river": 6, "cash": 7, "!": 8}


def batch(sentences):
    ids = torch.from_numpy(batch_to_char_ids(sentences))
    lengths = [len(s) for s in sentences]
    token_ids = torch.full((len(sentences), max(lengths)), 99)  # padding values must not matter
    for row, sentence in enumerate(sentences):
        token_ids[row, : len(sentence)] = torch.tensor([VOCAB[t] for t in sentence])
    return ids, lengths, token_ids


def test_top_states_match_the_user_visible_top_layer():
    bilm = random_bilm()
    ids, lengths, _ = batch(SENTENCES)
    with torch.no_grad():
        forward_top, backward_top = bilm.top_states(ids, lengths)
        layers = bilm(ids, lengths).layers
    p = bilm.config.projection_dim
    for row, n in enumerate(lengths):
        torch.testing.assert_close(forward_top[row, 1 : n + 1], layers[-1, row, :n, :p])
        torch.testing.assert_close(backward_top[row, 1 : n + 1], layers[-1, row, :n, p:])


def test_loss_is_the_mean_nll_of_next_and_previous_tokens():
    torch.manual_seed(0)
    bilm = random_bilm()
    head = FullSoftmax(bilm.config.projection_dim, len(VOCAB))
    objective = BiLMObjective(bilm, head)
    ids, lengths, token_ids = batch(SENTENCES)
    with torch.no_grad():
        result = objective(ids, lengths, token_ids)
        forward_top, backward_top = bilm.top_states(ids, lengths)
        expected_forward = expected_backward = 0.0
        for row, sentence in enumerate(SENTENCES):
            framed = [BOS_ID] + [VOCAB[t] for t in sentence] + [EOS_ID]
            forward_log_probs = head.log_probs(forward_top[row])
            backward_log_probs = head.log_probs(backward_top[row])
            for j in range(len(framed) - 1):
                expected_forward -= forward_log_probs[j, framed[j + 1]].item()
                expected_backward -= backward_log_probs[j + 1, framed[j]].item()
    assert result.predictions == sum(len(s) + 1 for s in SENTENCES)
    assert math.isclose(result.forward_nll.item(), expected_forward, rel_tol=1e-5)
    assert math.isclose(result.backward_nll.item(), expected_backward, rel_tol=1e-5)
    assert math.isclose(result.loss.item(), (expected_forward + expected_backward) / (2 * result.predictions), rel_tol=1e-5)


def test_a_tiny_model_learns_its_text():
    torch.manual_seed(1)
    bilm = random_bilm()
    with torch.no_grad():
        for param in bilm.parameters():
            param.mul_(0.1)  # start from small weights, as training does
    objective = BiLMObjective(bilm, FullSoftmax(bilm.config.projection_dim, len(VOCAB)))
    optimizer = torch.optim.Adam(objective.parameters(), lr=0.01)
    ids, lengths, token_ids = batch(SENTENCES)
    first = None
    for _ in range(60):
        optimizer.zero_grad()
        loss = objective(ids, lengths, token_ids).loss
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
    perplexity = math.exp(objective(ids, lengths, token_ids).loss.item())
    assert perplexity < math.exp(first) / 3


@pytest.mark.parametrize("kind", ["dropout", "weight_drop"])
def test_dropout_acts_in_training_only(kind):
    """Either kind changes the loss from batch to batch in training mode, and not at all in
    eval mode. (Weight drop acts in the differentiable training loop: with autograd on.)"""
    torch.manual_seed(2)
    bilm = random_bilm()
    ids, lengths, token_ids = batch(SENTENCES)
    objective = BiLMObjective(bilm, FullSoftmax(bilm.config.projection_dim, len(VOCAB)), **{kind: 0.5})
    plain = BiLMObjective(bilm, objective.head)
    exact = plain(ids, lengths, token_ids).loss.detach()
    objective.eval()
    assert torch.equal(objective(ids, lengths, token_ids).loss.detach(), exact)
    objective.train()
    first, second = (objective(ids, lengths, token_ids).loss.detach() for _ in range(2))
    assert not torch.equal(first, exact) and not torch.equal(first, second)


@pytest.mark.parametrize("kind", ["dropout", "weight_drop"])
def test_dropout_out_of_range_is_refused(kind):
    bilm = random_bilm()
    with pytest.raises(ValueError, match=kind):
        BiLMObjective(bilm, FullSoftmax(bilm.config.projection_dim, 5), **{kind: 1.0})
