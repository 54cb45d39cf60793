"""BiLM: shapes, a naive per-sentence reference, no future leakage, batch independence,
skip connections, helpers and the stateful wrapper."""

import pytest
import torch

from elmo_testing import TINY_SETTINGS, random_bilm
from spacy_elmo.nn.bilm import BiLM, StatefulBiLM, reverse_within_length, running_rows
from spacy_elmo.nn.chars import batch_to_char_ids
from spacy_elmo.nn.config import BiLMConfig

TINY = dict(TINY_SETTINGS, cell_clip=3.0, proj_clip=3.0, use_skip_connections=True)
P = 6

SENTENCES = [
    ["I", "sat", "by", "the", "bank", "."],
    ["The", "river", "\U0001f600"],
    ["Money", "in", "the", "bank", "is", "safe", "today", "!"],
    ["Hi"],
]

# Hand-written boundary tokens: begin-of-word 259, <S> 257 / </S> 258, end-of-word 260, padding 261.
BOS = [259, 257, 260] + [261] * 47
EOS = [259, 258, 260] + [261] * 47


def make_bilm(seed=0, **overrides):
    config = BiLMConfig(**{**TINY, **overrides})
    torch.manual_seed(seed)
    bilm = BiLM(config)
    with torch.no_grad():
        for param in bilm.parameters():
            param.normal_(0.0, 0.5)
    return bilm.eval()


def encode(sentences):
    return torch.from_numpy(batch_to_char_ids(sentences)), [len(s) for s in sentences]


def run(bilm, sentences, state=None):
    ids, lengths = encode(sentences)
    with torch.no_grad():
        return bilm(ids, lengths, state)


# ---------------------------------------------------------------- naive reference


def sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


def naive_lstm(lstm, xs, h=None, c=None):
    """xs: list of (input,) float64 vectors; per-step cell from the equations."""
    w_x, w_h = lstm.input_weight.detach().double(), lstm.recurrent_weight.detach().double()
    b = lstm.bias.detach().double()
    n = lstm.cell_dim
    forget_bias = float(getattr(lstm, "forget_bias", 0.0))
    h = torch.zeros(lstm.output_dim, dtype=torch.float64) if h is None else h.double()
    c = torch.zeros(n, dtype=torch.float64) if c is None else c.double()
    outs = []
    for x in xs:
        z = w_x @ x + w_h @ h + b
        i, f, g, o = z[:n], z[n : 2 * n] + forget_bias, z[2 * n : 3 * n], z[3 * n :]
        c = sigmoid(f) * c + sigmoid(i) * torch.tanh(g)
        if lstm.cell_clip is not None:
            c = c.clamp(-lstm.cell_clip, lstm.cell_clip)
        h = sigmoid(o) * torch.tanh(c)
        if lstm.projection is not None:
            h = lstm.projection.detach().double() @ h
            if lstm.proj_clip is not None:
                h = h.clamp(-lstm.proj_clip, lstm.proj_clip)
        outs.append(h)
    return outs, (h, c)


def naive_bilm(bilm, tokens):
    """One sentence alone: frame with <S> </S>, run each stack layer by layer, strip boundaries."""
    ids = torch.tensor([BOS] + batch_to_char_ids([tokens])[0].tolist() + [EOS])
    with torch.no_grad():
        encoded = [row.double() for row in bilm.token_encoder(ids)]
    skips = bilm.config.use_skip_connections

    def stack(modules, xs):
        layers = []
        for index, lstm in enumerate(modules.layers):
            ys, _ = naive_lstm(lstm, xs)
            if skips and index > 0:
                ys = [y + x for y, x in zip(ys, xs)]
            layers.append(ys)
            xs = ys
        return layers

    forward = stack(bilm.forward_stack, encoded)
    backward = [list(reversed(layer)) for layer in stack(bilm.backward_stack, list(reversed(encoded)))]
    out = [torch.stack([torch.cat([e, e]) for e in encoded])]
    out += [torch.stack([torch.cat([f, b]) for f, b in zip(fl, bl)]) for fl, bl in zip(forward, backward)]
    return torch.stack(out)[:, 1:-1]  # (n_layers + 1, n_tokens, 2P)


# ---------------------------------------------------------------- shapes and reference


def test_output_shapes_and_mask():
    bilm = make_bilm()
    out = run(bilm, SENTENCES)
    assert out.layers.shape == (3, 4, 8, 2 * P)
    assert out.mask.dtype == torch.bool
    expected_mask = torch.tensor([[t < len(s) for t in range(8)] for s in SENTENCES])
    assert torch.equal(out.mask, expected_mask)
    assert len(out.state) == 2
    for direction in out.state:
        assert len(direction) == 2
        for h, c in direction:
            assert h.shape == (4, P) and c.shape == (4, 12)


def test_three_layers_with_more_lstm_layers():
    bilm = make_bilm(n_layers=3)
    assert bilm.n_output_layers == 4
    assert run(bilm, SENTENCES[:2]).layers.shape == (4, 2, 6, 2 * P)


def test_matches_naive_per_sentence_reference():
    bilm = make_bilm()
    out = run(bilm, SENTENCES)
    for row, tokens in enumerate(SENTENCES):
        expected = naive_bilm(bilm, tokens)
        torch.testing.assert_close(out.layers[:, row, : len(tokens)].double(), expected, atol=1e-5, rtol=1e-5)


def test_matches_naive_reference_without_skips_or_clips():
    bilm = make_bilm(seed=3, use_skip_connections=False, cell_clip=None, proj_clip=None)
    out = run(bilm, SENTENCES[:3])
    for row, tokens in enumerate(SENTENCES[:3]):
        torch.testing.assert_close(out.layers[:, row, : len(tokens)].double(), naive_bilm(bilm, tokens), atol=1e-5, rtol=1e-5)


def test_matches_naive_reference_when_projection_equals_lstm_dim():
    bilm = make_bilm(seed=4, lstm_dim=6)
    assert bilm.forward_stack.layers[0].projection is None
    out = run(bilm, SENTENCES[:2])
    for row, tokens in enumerate(SENTENCES[:2]):
        torch.testing.assert_close(out.layers[:, row, : len(tokens)].double(), naive_bilm(bilm, tokens), atol=1e-5, rtol=1e-5)


def test_layer_zero_is_the_token_encoding_duplicated():
    bilm = make_bilm()
    ids, lengths = encode(SENTENCES)
    with torch.no_grad():
        out = bilm(ids, lengths)
        encoded = bilm.token_encoder(ids)
    for row, length in enumerate(lengths):
        torch.testing.assert_close(out.layers[0, row, :length, :P], encoded[row, :length])
        torch.testing.assert_close(out.layers[0, row, :length, P:], encoded[row, :length])


def test_positions_past_each_length_are_zero():
    bilm = make_bilm()
    out = run(bilm, SENTENCES)
    for row, tokens in enumerate(SENTENCES):
        assert (out.layers[:, row, len(tokens) :] == 0).all()
        assert (out.layers[:, row, : len(tokens)].abs().sum(-1) > 0).all()


# ---------------------------------------------------------------- no leakage


@pytest.mark.parametrize("t", [0, 2, 4])
def test_forward_half_does_not_see_the_future(t):
    bilm = make_bilm(seed=1)
    original = ["I", "sat", "by", "the", "bank", "of", "rivers"]
    changed = original[: t + 1] + ["zebra", "quux", "wombat", "x", "yy", "zzz"][: len(original) - t - 1]
    assert len(changed) == len(original) and changed[t + 1 :] != original[t + 1 :]
    a, b = run(bilm, [original]).layers, run(bilm, [changed]).layers
    for layer in (1, 2):
        torch.testing.assert_close(a[layer, 0, : t + 1, :P], b[layer, 0, : t + 1, :P], atol=1e-6, rtol=0)
        # guard: the change is visible after t and in the backward half at t
        assert (a[layer, 0, t + 1 :, :P] - b[layer, 0, t + 1 :, :P]).abs().max() > 1e-4
        assert (a[layer, 0, t, P:] - b[layer, 0, t, P:]).abs().max() > 1e-4


@pytest.mark.parametrize("t", [1, 3, 6])
def test_backward_half_does_not_see_the_past(t):
    bilm = make_bilm(seed=2)
    original = ["I", "sat", "by", "the", "bank", "of", "rivers"]
    changed = ["zebra", "quux", "wombat", "x", "yy", "zzz"][:t] + original[t:]
    a, b = run(bilm, [original]).layers, run(bilm, [changed]).layers
    for layer in (1, 2):
        torch.testing.assert_close(a[layer, 0, t:, P:], b[layer, 0, t:, P:], atol=1e-6, rtol=0)
        assert (a[layer, 0, :t, P:] - b[layer, 0, :t, P:]).abs().max() > 1e-4
        assert (a[layer, 0, t, :P] - b[layer, 0, t, :P]).abs().max() > 1e-4


# ---------------------------------------------------------------- batch independence


def test_row_alone_equals_row_in_a_batch_with_longer_rows():
    bilm = make_bilm()
    batched = run(bilm, SENTENCES)
    for row, tokens in enumerate(SENTENCES):
        alone = run(bilm, [tokens])
        torch.testing.assert_close(batched.layers[:, row, : len(tokens)], alone.layers[:, 0], atol=1e-5, rtol=0)
        for d in range(2):
            for layer in range(2):
                torch.testing.assert_close(batched.state[d][layer][0][row], alone.state[d][layer][0][0], atol=1e-5, rtol=0)
                torch.testing.assert_close(batched.state[d][layer][1][row], alone.state[d][layer][1][0], atol=1e-5, rtol=0)


def test_row_order_in_the_batch_does_not_matter():
    bilm = make_bilm()
    order = [3, 0, 2, 1]
    a = run(bilm, SENTENCES)
    b = run(bilm, [SENTENCES[i] for i in order])
    for new, old in enumerate(order):
        torch.testing.assert_close(b.layers[:, new], a.layers[:, old], atol=1e-5, rtol=0)
        torch.testing.assert_close(b.mask[new], a.mask[old])


def test_equal_lengths_keep_input_order():
    bilm = make_bilm()
    sentences = [["a", "b"], ["c", "d"], ["e", "f"]]
    out = run(bilm, sentences)
    for row, tokens in enumerate(sentences):
        torch.testing.assert_close(out.layers[:, row], run(bilm, [tokens]).layers[:, 0], atol=1e-5, rtol=0)


def test_extra_padding_and_garbage_padding_do_not_matter():
    bilm = make_bilm()
    ids, lengths = encode(SENTENCES[:2])
    padded = torch.zeros(2, ids.shape[1] + 5, 50, dtype=torch.long)
    padded[:, : ids.shape[1]] = ids
    garbage = padded.clone()
    garbage[1, lengths[1] :] = 100  # rows past the length filled with a real-looking char id
    garbage[0, lengths[0] :] = 7
    with torch.no_grad():
        base = bilm(ids, lengths).layers
        a = bilm(padded, lengths).layers
        b = bilm(garbage, lengths).layers
    assert a.shape == (3, 2, ids.shape[1] + 5, 2 * P)
    torch.testing.assert_close(a[:, :, : ids.shape[1]], base, atol=1e-5, rtol=0)
    torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
    assert (a[:, :, ids.shape[1] :] == 0).all()


def test_lengths_accept_a_tensor():
    bilm = make_bilm()
    ids, lengths = encode(SENTENCES)
    with torch.no_grad():
        a = bilm(ids, lengths).layers
        b = bilm(ids, torch.tensor(lengths)).layers
    torch.testing.assert_close(a, b)


# ---------------------------------------------------------------- skip connections


def test_skip_connections_add_residuals_from_layer_two_on():
    with_skips = make_bilm(seed=5, use_skip_connections=True)
    without = BiLM(BiLMConfig(**{**TINY, "use_skip_connections": False})).eval()
    without.load_state_dict(with_skips.state_dict())
    a = run(with_skips, SENTENCES).layers
    b = run(without, SENTENCES).layers
    torch.testing.assert_close(a[0], b[0])
    torch.testing.assert_close(a[1], b[1], atol=1e-6, rtol=0)
    assert (a[2] - b[2]).abs().max() > 1e-2
    # the residual is exactly the previous layer's output, per direction
    torch.testing.assert_close(a[2], b[2] + a[1], atol=1e-5, rtol=0)


def test_skip_connections_compound_over_three_layers():
    with_skips = make_bilm(seed=6, n_layers=3)
    without = BiLM(BiLMConfig(**{**TINY, "n_layers": 3, "use_skip_connections": False})).eval()
    without.load_state_dict(with_skips.state_dict())
    out = run(with_skips, SENTENCES[:2])
    for row, tokens in enumerate(SENTENCES[:2]):
        torch.testing.assert_close(out.layers[:, row, : len(tokens)].double(), naive_bilm(with_skips, tokens), atol=1e-5, rtol=1e-5)
    assert (out.layers[3] - run(without, SENTENCES[:2]).layers[3]).abs().max() > 1e-2


# ---------------------------------------------------------------- helpers


def test_reverse_within_length():
    x = torch.arange(10, dtype=torch.float32).reshape(2, 5, 1).repeat(1, 1, 2)
    out = reverse_within_length(x, torch.tensor([3, 5]))
    assert out[0, :, 0].tolist() == [2, 1, 0, 3, 4]
    assert out[1, :, 0].tolist() == [9, 8, 7, 6, 5]
    assert torch.equal(out[..., 0], out[..., 1])
    torch.testing.assert_close(reverse_within_length(out, torch.tensor([3, 5])), x)


def test_reverse_within_length_one_and_zero():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3, 1)
    out = reverse_within_length(x, torch.tensor([1, 0]))
    torch.testing.assert_close(out, x)


def test_running_rows():
    assert running_rows([5, 3, 3, 1], 6) == [4, 3, 3, 1, 1, 0]
    assert running_rows([2, 2], 2) == [2, 2]
    assert running_rows([4], 3) == [1, 1, 1]
    assert running_rows([], 3) == [0, 0, 0]
    assert running_rows([3, 1], 0) == []


def test_boundary_vectors_encode_the_sentence_marks():
    bilm = make_bilm()
    with torch.no_grad():
        boundaries = bilm.boundary_vectors()
        expected = bilm.token_encoder(torch.tensor([BOS, EOS]))
    assert boundaries.shape == (2, P)
    torch.testing.assert_close(boundaries, expected, rtol=0, atol=0)


def test_contextualize_on_token_encodings_equals_forward():
    bilm = make_bilm()
    ids, lengths = encode([["ab", "c"], ["d"]])
    with torch.no_grad():
        mask = torch.arange(ids.shape[1]).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        tokens = torch.zeros(*ids.shape[:2], P)
        tokens[mask] = bilm.token_encoder(ids[mask])
        tokens[~mask] = 123.0  # padding rows must not matter
        via_tokens = bilm.contextualize(tokens, lengths).layers
        direct = bilm(ids, lengths).layers
    torch.testing.assert_close(via_tokens, direct, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- empty and invalid input


def test_zero_length_batch_returns_empty_layers():
    bilm = make_bilm()
    out = bilm(torch.zeros(0, 0, 50, dtype=torch.long), [])
    assert out.layers.shape == (3, 0, 0, 2 * P)
    assert out.mask.shape == (0, 0)
    ids = torch.from_numpy(batch_to_char_ids([]))
    assert bilm(ids, []).layers.shape == (3, 0, 0, 2 * P)


def test_batch_of_empty_rows_with_no_time_returns_empty_layers():
    bilm = make_bilm()
    out = bilm(torch.zeros(2, 0, 50, dtype=torch.long), [0, 0])
    assert out.layers.shape == (3, 2, 0, 2 * P)
    assert out.mask.shape == (2, 0)
    assert len(out.state) == 2 and out.state[0][0][0].shape == (2, P)


def test_a_row_of_length_zero_raises():
    bilm = make_bilm()
    ids, _ = encode([["a", "b"], []])
    with pytest.raises(ValueError, match="lengths must lie in 1..2"):
        bilm(ids, [2, 0])


def test_lengths_beyond_the_padded_length_raise():
    bilm = make_bilm()
    ids, _ = encode([["a", "b"], ["c"]])
    with pytest.raises(ValueError, match="lengths must lie in 1..2"):
        bilm(ids, [3, 1])
    with pytest.raises(ValueError, match="expected 2 lengths"):
        bilm(ids, [2])
    with pytest.raises(ValueError, match="must be 0 for an empty batch"):
        bilm(torch.zeros(2, 0, 50, dtype=torch.long), [3, 3])


# ---------------------------------------------------------------- gradients


def test_gradients_reach_both_stacks_and_the_encoder():
    bilm = make_bilm()
    bilm.train()
    ids, lengths = encode(SENTENCES[:2])
    out = bilm(ids, lengths)
    out.layers[2].sum().backward()
    for stack in (bilm.forward_stack, bilm.backward_stack):
        for layer in stack.layers:
            assert layer.input_weight.grad is not None and layer.input_weight.grad.abs().sum() > 0
    assert bilm.token_encoder.char_embedding.weight.grad.abs().sum() > 0


def test_the_training_pass_equals_inference_with_a_state_of_its_own_per_direction_and_layer():
    """With autograd recording, both stacks run layer by layer in one time loop
    (`run_stacks`); inference runs each direction on its own. With dropout off and a
    different explicit initial state for each direction and layer, the two agree on every
    layer, every final state and the top states the language model trains on."""
    bilm = make_bilm(seed=3, n_layers=3).double()
    ids, lengths = encode(SENTENCES)
    generator = torch.Generator().manual_seed(5)
    state = [
        [(torch.randn(4, P, generator=generator, dtype=torch.float64), torch.randn(4, 12, generator=generator, dtype=torch.float64)) for _ in range(3)]
        for _ in range(2)
    ]
    with torch.no_grad():
        inference = bilm(ids, lengths, state)
        top_inference = bilm.top_states(ids, lengths)
    training = bilm(ids, lengths, state)
    top_training = bilm.top_states(ids, lengths)
    assert training.layers.requires_grad and top_training[0].requires_grad
    torch.testing.assert_close(training.layers, inference.layers, rtol=1e-10, atol=1e-10)
    for direction in range(2):
        for layer in range(3):
            for got, expected in zip(training.state[direction][layer], inference.state[direction][layer]):
                torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    for got, expected in zip(top_training, top_inference):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- explicit state


def test_explicit_initial_state_is_used_per_row():
    bilm = make_bilm(seed=7)
    first = run(bilm, [SENTENCES[2], SENTENCES[1]])
    second_tokens = [SENTENCES[0], SENTENCES[3]]
    carried = run(bilm, second_tokens, first.state)
    fresh = run(bilm, second_tokens)
    assert (carried.layers[1:] - fresh.layers[1:]).abs().max() > 1e-3
    torch.testing.assert_close(carried.layers[0], fresh.layers[0])
    # row 1 (shorter) alone with its own state gives the same result: state follows the row
    alone_state = [[(h[1:2], c[1:2]) for h, c in direction] for direction in first.state]
    alone = run(bilm, [second_tokens[1]], alone_state)
    torch.testing.assert_close(carried.layers[:, 1, :1], alone.layers[:, 0], atol=1e-5, rtol=0)


# ---------------------------------------------------------------- stateful wrapper


def test_stateful_first_call_equals_stateless_and_second_differs():
    bilm = make_bilm(seed=8)
    runner = StatefulBiLM(bilm)
    ids, lengths = encode(SENTENCES[:3])
    with torch.no_grad():
        stateless = bilm(ids, lengths)
        first = runner(ids, lengths)
        second = runner(ids, lengths)
    torch.testing.assert_close(first.layers, stateless.layers)
    assert (second.layers[1:] - stateless.layers[1:]).abs().max() > 1e-3
    # the second call is the biLM started from the first call's final state
    with torch.no_grad():
        explicit = bilm(ids, lengths, first.state)
    torch.testing.assert_close(second.layers, explicit.layers)


def test_stateful_reset_restores_stateless_behaviour():
    bilm = make_bilm(seed=9)
    runner = StatefulBiLM(bilm)
    ids, lengths = encode(SENTENCES[:2])
    with torch.no_grad():
        stateless = bilm(ids, lengths)
        runner(ids, lengths)
        runner(ids, lengths)
        runner.reset()
        after_reset = runner(ids, lengths)
    torch.testing.assert_close(after_reset.layers, stateless.layers)


def test_stateful_growing_and_shrinking_batch():
    bilm = make_bilm(seed=10)
    runner = StatefulBiLM(bilm)
    small_ids, small_lengths = encode(SENTENCES[:2])
    big_sentences = [SENTENCES[1], SENTENCES[0], SENTENCES[2]]
    big_ids, big_lengths = encode(big_sentences)
    with torch.no_grad():
        first = runner(small_ids, small_lengths)
        grown = runner(big_ids, big_lengths)
        # rows 0-1 continue from their state, row 2 starts from zeros
        zeros = [[layer.zero_state(1, big_ids.float()) for layer in stack.layers] for stack in (bilm.forward_stack, bilm.backward_stack)]
        initial = [[(torch.cat([h, hz]), torch.cat([c, cz])) for (h, c), (hz, cz) in zip(d, dz)] for d, dz in zip(first.state, zeros)]
        expected = bilm(big_ids, big_lengths, initial)
        torch.testing.assert_close(grown.layers, expected.layers)
        torch.testing.assert_close(
            grown.layers[:, 2, : len(big_sentences[2])],
            bilm(*encode([big_sentences[2]])).layers[:, 0],
            atol=1e-5,
            rtol=0,
        )
        assert runner.state[0][0][0].shape == (3, P)
        # shrinking: rows beyond the batch keep their state
        kept = [[(h[1:].clone(), c[1:].clone()) for h, c in d] for d in runner.state]
        one_ids, one_lengths = encode([SENTENCES[3]])
        runner(one_ids, one_lengths)
        for d in range(2):
            for layer in range(2):
                assert runner.state[d][layer][0].shape == (3, P)
                torch.testing.assert_close(runner.state[d][layer][0][1:], kept[d][layer][0])
                torch.testing.assert_close(runner.state[d][layer][1][1:], kept[d][layer][1])


def test_stateful_state_does_not_carry_the_autograd_graph():
    """StatefulBiLM detaches the carried state: with grad enabled no call's graph stays
    alive through it, and a backward pass on the second call does not walk into the first
    call's graph, as in AllenNLP's stateful encoder."""
    bilm = make_bilm(seed=11)
    bilm.train()
    runner = StatefulBiLM(bilm)
    ids, lengths = encode(SENTENCES[:2])
    runner(ids, lengths).layers.sum().backward()
    assert not runner.state[0][0][0].requires_grad, "carried state still holds the autograd graph"
    runner(ids, lengths).layers.sum().backward()  # would raise if the first graph were still attached


def test_stack_dropout_drops_each_layer_input_and_the_residual_adds_the_dropped_input():
    bilm = random_bilm().train()
    stack = bilm.forward_stack
    x = torch.randn(3, 5, bilm.config.projection_dim)
    sizes = [3, 3, 3, 3, 3]
    torch.manual_seed(7)
    outputs, _ = stack(x, sizes, dropout=0.5)
    torch.manual_seed(7)
    dropped0 = torch.nn.functional.dropout(x, 0.5)
    y0, _ = stack.layers[0](dropped0, sizes)
    dropped1 = torch.nn.functional.dropout(y0, 0.5)
    y1, _ = stack.layers[1](dropped1, sizes)
    torch.testing.assert_close(outputs[0], y0)
    torch.testing.assert_close(outputs[1], y1 + dropped1)
    assert not torch.equal(dropped1, y0)
