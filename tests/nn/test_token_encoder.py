"""TokenEncoder against a naive char-CNN + highway + projection written with explicit loops."""

import math

import pytest
import torch

from elmo_testing import TINY_SETTINGS
from spacy_elmo.nn.chars import batch_to_char_ids
from spacy_elmo.nn.config import BiLMConfig
from spacy_elmo.nn.token_encoder import Highway, TokenEncoder

TINY = TINY_SETTINGS

WORDS = ["a", "bank", "river", "\U0001f600", "x" * 60, "日本", "I", "sat"]


def make_encoder(seed=0, **overrides):
    config = BiLMConfig(**{**TINY, **overrides})
    torch.manual_seed(seed)
    encoder = TokenEncoder(config)
    with torch.no_grad():
        for param in encoder.parameters():
            param.normal_(0.0, 0.5)
    return config, encoder.eval()


def char_ids(words):
    return torch.from_numpy(batch_to_char_ids([words]))[0]  # (n_tokens, 50)


def naive_encode(encoder, config, ids, n_positions=None):
    """Explicit-loop reference in float64.

    embedding lookup -> for every filter, every window start: sum_{k,d} W[f,d,k] * e[start+k,d] + b[f]
    -> max over window starts -> activation -> highways -> projection.
    `n_positions` (default: all) limits the character positions seen by the CNN.
    """
    table = encoder.char_embedding.weight.detach().double()
    act = (lambda v: max(v, 0.0)) if config.activation == "relu" else math.tanh
    results = []
    for token in ids.tolist():
        token = token[: n_positions or len(token)]
        emb = [table[c] for c in token]  # list of (d,)
        features = []
        for conv, (width, n_filters) in zip(encoder.cnn.convs, config.filters):
            weight = conv.weight.detach().double()  # (n_filters, d, width)
            bias = conv.bias.detach().double()
            for f in range(n_filters):
                best = -math.inf
                for start in range(len(emb) - width + 1):
                    value = float(bias[f])
                    for k in range(width):
                        value += float(torch.dot(weight[f, :, k], emb[start + k]))
                    best = max(best, value)
                features.append(act(best))
        x = torch.tensor(features, dtype=torch.float64)
        for highway in encoder.highways:
            wt, bt = highway.transform.weight.detach().double(), highway.transform.bias.detach().double()
            wg, bg = highway.gate.weight.detach().double(), highway.gate.bias.detach().double()
            transform = torch.clamp(wt @ x + bt, min=0.0)
            gate = 1.0 / (1.0 + torch.exp(-(wg @ x + bg)))
            x = gate * transform + (1.0 - gate) * x
        if encoder.projection is not None:
            x = encoder.projection.weight.detach().double() @ x + encoder.projection.bias.detach().double()
        results.append(x)
    return torch.stack(results)


@pytest.mark.parametrize("activation,n_highway", [("relu", 1), ("tanh", 2), ("relu", 0)])
def test_matches_naive_reference(activation, n_highway):
    config, encoder = make_encoder(activation=activation, n_highway=n_highway)
    ids = char_ids(WORDS[:5])
    with torch.no_grad():
        got = encoder(ids)
    expected = naive_encode(encoder, config, ids)
    assert got.shape == (5, config.projection_dim)
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)


def test_padding_windows_enter_the_max_pool():
    """The in-word padding char has a learned embedding; all-padding windows count."""
    config, encoder = make_encoder(seed=1)
    with torch.no_grad():
        # Make every filter respond most strongly to the padding character (id 261).
        for conv in encoder.cnn.convs:
            conv.weight.abs_()
        encoder.char_embedding.weight[261] = 5.0
    ids = char_ids(["ab", "cde"])
    with torch.no_grad():
        got = encoder(ids).double()
    full = naive_encode(encoder, config, ids)
    trimmed = naive_encode(encoder, config, ids, n_positions=6)  # BOW + 3 bytes + EOW + 1 pad
    torch.testing.assert_close(got, full, atol=1e-5, rtol=1e-5)
    assert (got - trimmed).abs().max() > 1e-2


def test_projection_is_none_when_filters_equal_projection_dim():
    config, encoder = make_encoder(filters=((1, 2), (2, 4)), projection_dim=6)
    assert config.n_filters == 6
    assert encoder.projection is None
    ids = char_ids(WORDS[:3])
    with torch.no_grad():
        got = encoder(ids)
    assert got.shape == (3, 6)
    torch.testing.assert_close(got.double(), naive_encode(encoder, config, ids), atol=1e-5, rtol=1e-5)


def test_projection_exists_otherwise():
    config, encoder = make_encoder()
    assert encoder.projection is not None
    assert tuple(encoder.projection.weight.shape) == (config.projection_dim, config.n_filters)


def test_handles_leading_dims():
    config, encoder = make_encoder()
    ids = torch.from_numpy(batch_to_char_ids([WORDS[:3], WORDS[3:6]]))  # (2, 3, 50)
    with torch.no_grad():
        got = encoder(ids)
        flat = encoder(ids.reshape(6, 50))
        single = encoder(ids[1, 2])
    assert got.shape == (2, 3, config.projection_dim)
    torch.testing.assert_close(got.reshape(6, -1), flat)
    assert single.shape == (config.projection_dim,)
    torch.testing.assert_close(single, got[1, 2], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got.reshape(6, -1).double(), naive_encode(encoder, config, ids.reshape(6, 50)), atol=1e-5, rtol=1e-5)


def test_each_token_is_encoded_independently():
    config, encoder = make_encoder()
    ids = char_ids(WORDS)
    with torch.no_grad():
        together = encoder(ids)
        alone = torch.cat([encoder(ids[i : i + 1]) for i in range(len(WORDS))])
    torch.testing.assert_close(together, alone, atol=1e-6, rtol=1e-6)


def test_padding_row_of_embedding_is_zero_at_init():
    torch.manual_seed(0)
    encoder = TokenEncoder(BiLMConfig(**TINY))
    assert encoder.char_embedding.weight.shape == (262, 4)
    assert (encoder.char_embedding.weight[0] == 0).all()


def test_highway_matches_formula_and_limits():
    torch.manual_seed(3)
    highway = Highway(5)
    x = torch.randn(4, 5, dtype=torch.float64)
    highway = highway.double()
    with torch.no_grad():
        got = highway(x)
        g = 1.0 / (1.0 + torch.exp(-(x @ highway.gate.weight.T + highway.gate.bias)))
        t = torch.clamp(x @ highway.transform.weight.T + highway.transform.bias, min=0.0)
        torch.testing.assert_close(got, g * t + (1 - g) * x)
        # gate closed (very negative gate bias): carry the input unchanged
        highway.gate.weight.zero_()
        highway.gate.bias.fill_(-100.0)
        torch.testing.assert_close(highway(x), x)
        # gate open: pure relu transform
        highway.gate.bias.fill_(100.0)
        torch.testing.assert_close(highway(x), t)


def test_gradients_reach_char_embeddings_and_convs():
    config, encoder = make_encoder()
    encoder.train()
    encoder(char_ids(WORDS[:3])).sum().backward()
    assert encoder.char_embedding.weight.grad is not None
    assert encoder.char_embedding.weight.grad[ord("a") + 1].abs().sum() > 0
    for conv in encoder.cnn.convs:
        assert conv.weight.grad.abs().sum() > 0


def plain_encode(encoder, config, ids):
    """Autograd reference: conv1d over every character position, max over positions, activation, highways, projection."""
    embedded = encoder.char_embedding(ids).transpose(1, 2)  # (n_tokens, char_dim, n_chars)
    pooled = torch.cat([conv(embedded).amax(dim=2) for conv in encoder.cnn.convs], dim=1)
    x = torch.relu(pooled) if config.activation == "relu" else torch.tanh(pooled)
    for highway in encoder.highways:
        x = highway(x)
    return encoder.projection(x) if encoder.projection is not None else x


@pytest.mark.parametrize("activation,n_highway", [("relu", 1), ("tanh", 2)])
def test_gradients_match_autograd_through_a_plain_conv_and_max_pool(activation, n_highway):
    """Every parameter's gradient, float64, tokens with repeated characters (tied windows),
    trailing padding and a cut token, against autograd through conv1d over all positions."""
    config, encoder = make_encoder(seed=5, activation=activation, n_highway=n_highway)
    encoder.double().train()
    ids = char_ids(WORDS + ["letter", "aaaa", "bank"])
    weights = torch.randn(len(ids), config.projection_dim, dtype=torch.float64)
    (encoder(ids) * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in encoder.named_parameters()}
    encoder.zero_grad()
    (plain_encode(encoder, config, ids) * weights).sum().backward()
    for name, p in encoder.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, atol=1e-10, rtol=1e-9, msg=name)


def test_repeated_tokens_have_the_values_and_summed_gradients_of_tokens_encoded_alone():
    """Each distinct token is encoded once: values, and parameter gradients summed over its
    repeats, must equal encoding every token on its own."""
    config, encoder = make_encoder(seed=4)
    words = ["bank", "the", "bank", "a", "the", "bank", "river"]
    weights = torch.randn(len(words), config.projection_dim)
    batched = encoder(char_ids(words))
    (batched * weights).sum().backward()
    together = {name: p.grad.clone() for name, p in encoder.named_parameters()}
    encoder.zero_grad()
    alone = torch.cat([encoder(char_ids([w])) for w in words])
    (alone * weights).sum().backward()
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-6)
    for name, p in encoder.named_parameters():
        torch.testing.assert_close(together[name], p.grad, atol=1e-5, rtol=1e-5, msg=name)
