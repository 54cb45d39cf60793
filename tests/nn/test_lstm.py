"""ProjectedLSTM against a naive per-step, per-row cell written from the equations."""

import pytest
import torch

from spacy_elmo.nn.lstm import ProjectedLSTM

INPUT, CELL, PROJ = 5, 12, 6


def sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


def clip(x, bound):
    if bound is None:
        return x, False
    clipped = torch.maximum(torch.minimum(x, torch.full_like(x, bound)), torch.full_like(x, -bound))
    return clipped, bool((clipped != x).any())


def naive_lstm(lstm, x, h0=None, c0=None, differentiable=False):
    """One row, float64. x: (T, input). Returns outputs (T, out), (h, c), and how often clipping bit.
    `differentiable`: the result depends on the weights through autograd.

    z = W_x x_t + W_h h_{t-1} + b, gates i, f, g, o in that order, with the constant
    TF-style `forget_bias` added to f on top of the learned bias;
    c_t = clip(sig(f) * c_{t-1} + sig(i) * tanh(g)); h_t = sig(o) * tanh(c_t);
    p_t = clip(P h_t) when there is a projection.
    """

    def weight(param):
        return param.double() if differentiable else param.detach().double()

    w_x, w_h, b = weight(lstm.input_weight), weight(lstm.recurrent_weight), weight(lstm.bias)
    proj = weight(lstm.projection) if lstm.projection is not None else None
    n = lstm.cell_dim
    forget_bias = float(getattr(lstm, "forget_bias", 0.0))
    h = torch.zeros(lstm.output_dim, dtype=torch.float64) if h0 is None else h0.detach().double().clone()
    c = torch.zeros(n, dtype=torch.float64) if c0 is None else c0.detach().double().clone()
    outputs, clips = [], {"cell": 0, "proj": 0}
    for t in range(x.shape[0]):
        z = w_x @ x[t].double() + w_h @ h + b
        i, f, g, o = z[:n], z[n : 2 * n] + forget_bias, z[2 * n : 3 * n], z[3 * n :]
        c = sigmoid(f) * c + sigmoid(i) * torch.tanh(g)
        c, hit = clip(c, lstm.cell_clip)
        clips["cell"] += hit
        h = sigmoid(o) * torch.tanh(c)
        if proj is not None:
            h = proj @ h
            h, hit = clip(h, lstm.proj_clip)
            clips["proj"] += hit
        outputs.append(h)
    return torch.stack(outputs), (h, c), clips


def make_lstm(seed=0, projection=PROJ, cell_clip=3.0, proj_clip=3.0, large=True):
    torch.manual_seed(seed)
    lstm = ProjectedLSTM(INPUT, CELL, projection, cell_clip, proj_clip)
    if large:
        # Weights large enough that both clips are active: a saturated forget gate and
        # input gate let the cell grow by ~1 per step; a wide projection exceeds 3.
        with torch.no_grad():
            lstm.input_weight.normal_(0.0, 0.5)
            lstm.recurrent_weight.normal_(0.0, 0.5)
            lstm.bias.normal_(0.0, 0.5)
            lstm.bias[:CELL] += 4.0  # input gate open
            lstm.bias[CELL : 2 * CELL] += 6.0  # forget gate open
            lstm.bias[2 * CELL : 3 * CELL] += torch.where(torch.arange(CELL) % 2 == 0, 3.0, -3.0)
            if lstm.projection is not None:
                lstm.projection.normal_(0.0, 2.0)
    return lstm


def lengths_to_batch_sizes(lengths, time):
    return [sum(1 for length in lengths if length > t) for t in range(time)]


def test_matches_naive_reference_with_active_clipping():
    lstm = make_lstm()
    torch.manual_seed(1)
    x = torch.randn(3, 8, INPUT)
    with torch.no_grad():
        out, (h, c) = lstm(x, [3] * 8)
    assert out.shape == (3, 8, PROJ) and h.shape == (3, PROJ) and c.shape == (3, CELL)
    total = {"cell": 0, "proj": 0}
    for row in range(3):
        expected, (eh, ec), clips = naive_lstm(lstm, x[row])
        total = {k: total[k] + clips[k] for k in total}
        torch.testing.assert_close(out[row].double(), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(h[row].double(), eh, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(c[row].double(), ec, atol=1e-5, rtol=1e-5)
    # guard: the weights really exercise both clips
    assert total["cell"] > 0 and total["proj"] > 0
    assert out.abs().max() <= 3.0 + 1e-6
    assert c.abs().max() <= 3.0 + 1e-6


def test_clipping_changes_the_result():
    clipped = make_lstm()
    unclipped = make_lstm(cell_clip=None, proj_clip=None)
    torch.testing.assert_close(dict(clipped.named_parameters()), dict(unclipped.named_parameters()))
    torch.manual_seed(1)
    x = torch.randn(2, 8, INPUT)
    with torch.no_grad():
        a, (_, ca) = clipped(x, [2] * 8)
        b, (_, cb) = unclipped(x, [2] * 8)
    assert (a - b).abs().max() > 1e-2
    assert cb.abs().max() > 3.0  # the unclipped cell really left [-3, 3]
    expected, _, clips = naive_lstm(unclipped, x[0])
    assert clips == {"cell": 0, "proj": 0}
    torch.testing.assert_close(b[0].double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cell_clip,proj_clip", [(3.0, None), (None, 3.0)])
def test_each_clip_alone_matches_reference(cell_clip, proj_clip):
    lstm = make_lstm(cell_clip=cell_clip, proj_clip=proj_clip)
    torch.manual_seed(2)
    x = torch.randn(1, 7, INPUT)
    with torch.no_grad():
        out, _ = lstm(x, [1] * 7)
    expected, _, _ = naive_lstm(lstm, x[0])
    torch.testing.assert_close(out[0].double(), expected, atol=1e-5, rtol=1e-5)


def test_without_projection_output_is_the_cell_size():
    lstm = make_lstm(projection=None)
    assert lstm.projection is None and lstm.output_dim == CELL
    assert tuple(lstm.recurrent_weight.shape) == (4 * CELL, CELL)
    torch.manual_seed(4)
    x = torch.randn(2, 6, INPUT)
    with torch.no_grad():
        out, (h, c) = lstm(x, [2] * 6)
    assert out.shape == (2, 6, CELL)
    for row in range(2):
        expected, (eh, ec), _ = naive_lstm(lstm, x[row])
        torch.testing.assert_close(out[row].double(), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(h[row].double(), eh, atol=1e-5, rtol=1e-5)


def test_default_init_has_effective_forget_bias_one():
    """At init every gate pre-activation bias is 0 except the forget gate's, which is 1."""
    lstm = ProjectedLSTM(INPUT, CELL, PROJ)
    effective = lstm.bias.detach().clone()
    effective[CELL : 2 * CELL] += float(getattr(lstm, "forget_bias", 0.0))
    expected = torch.zeros(4 * CELL)
    expected[CELL : 2 * CELL] = 1.0
    torch.testing.assert_close(effective, expected)
    # behaviourally: zero weights, zero input -> c_1 = sig(0) * tanh(0) = 0 and the
    # forget gate sig(1) scales a non-zero initial cell
    with torch.no_grad():
        lstm.input_weight.zero_()
        lstm.recurrent_weight.zero_()
        c0 = torch.ones(1, CELL)
        _, (_, c) = lstm(torch.zeros(1, 1, INPUT), [1], (torch.zeros(1, PROJ), c0))
    torch.testing.assert_close(c, torch.full((1, CELL), 1.0 / (1.0 + torch.exp(torch.tensor(-1.0)).item())))


def test_forget_bias_is_a_constant_on_top_of_the_learned_bias():
    shifted = make_lstm(seed=13)
    shifted.forget_bias = 2.5
    folded = make_lstm(seed=13)
    folded.forget_bias = 0.0
    with torch.no_grad():
        folded.bias[CELL : 2 * CELL] += 2.5
    x = torch.randn(2, 5, INPUT)
    with torch.no_grad():
        a, _ = shifted(x, [2] * 5)
        b, _ = folded(x, [2] * 5)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    assert "forget_bias" not in dict(shifted.named_parameters())


def test_variable_lengths_equal_rows_run_alone():
    lstm = make_lstm(seed=5)
    lengths = [7, 5, 5, 2, 1]
    time = 7
    torch.manual_seed(6)
    x = torch.randn(len(lengths), time, INPUT)
    batch_sizes = lengths_to_batch_sizes(lengths, time)
    assert batch_sizes == [5, 4, 3, 3, 3, 1, 1]
    with torch.no_grad():
        out, (h, c) = lstm(x, batch_sizes)
        for row, length in enumerate(lengths):
            alone, (ha, ca) = lstm(x[row : row + 1, :length], [1] * length)
            torch.testing.assert_close(out[row, :length], alone[0], atol=1e-5, rtol=1e-5)
            assert (out[row, length:] == 0).all()
            # final state taken at the row's last step
            torch.testing.assert_close(h[row], ha[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(c[row], ca[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(h[row], out[row, length - 1])
            expected, (eh, ec), _ = naive_lstm(lstm, x[row, :length])
            torch.testing.assert_close(out[row, :length].double(), expected, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(c[row].double(), ec, atol=1e-5, rtol=1e-5)


def test_inputs_past_the_length_are_ignored():
    lstm = make_lstm(seed=7)
    torch.manual_seed(8)
    x = torch.randn(2, 6, INPUT)
    y = x.clone()
    y[1, 3:] = 100.0  # garbage in the padding of row 1 (length 3)
    with torch.no_grad():
        a, (ha, ca) = lstm(x, [2, 2, 2, 1, 1, 1])
        b, (hb, cb) = lstm(y, [2, 2, 2, 1, 1, 1])
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(ha, hb)
    torch.testing.assert_close(ca, cb)


def test_initial_state_is_used():
    lstm = make_lstm(seed=9)
    torch.manual_seed(10)
    x = torch.randn(3, 5, INPUT)
    h0 = torch.randn(3, PROJ)
    c0 = torch.randn(3, CELL) * 2
    lengths = [5, 4, 2]
    with torch.no_grad():
        out, (h, c) = lstm(x, lengths_to_batch_sizes(lengths, 5), (h0, c0))
        zero, _ = lstm(x, lengths_to_batch_sizes(lengths, 5))
    for row, length in enumerate(lengths):
        expected, (eh, ec), _ = naive_lstm(lstm, x[row, :length], h0[row], c0[row])
        torch.testing.assert_close(out[row, :length].double(), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(h[row].double(), eh, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(c[row].double(), ec, atol=1e-5, rtol=1e-5)
    assert (out[:, 0] - zero[:, 0]).abs().max() > 1e-3


def test_initial_state_is_not_modified_in_place():
    lstm = make_lstm(seed=11)
    x = torch.randn(2, 4, INPUT)
    h0, c0 = torch.randn(2, PROJ), torch.randn(2, CELL)
    h0_copy, c0_copy = h0.clone(), c0.clone()
    with torch.no_grad():
        lstm(x, [2, 2, 1, 1], (h0, c0))
    torch.testing.assert_close(h0, h0_copy)
    torch.testing.assert_close(c0, c0_copy)


def test_zero_state_shapes():
    lstm = make_lstm()
    h, c = lstm.zero_state(4, torch.zeros(1, dtype=torch.float64))
    assert h.shape == (4, PROJ) and c.shape == (4, CELL)
    assert h.dtype == torch.float64 and (h == 0).all() and (c == 0).all()


def test_gradients_flow_to_all_parameters_and_inputs():
    lstm = make_lstm(seed=12, large=False)
    x = torch.randn(2, 4, INPUT, requires_grad=True)
    out, (h, c) = lstm(x, [2, 2, 1, 1])
    (out.sum() + c.sum()).backward()
    for name, param in lstm.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert x.grad[1, 2:].abs().sum() == 0  # padding gets no gradient
    assert x.grad[0].abs().sum() > 0


@pytest.mark.parametrize("projection", [PROJ, None])
@pytest.mark.parametrize("large", [False, True], ids=["small weights", "clipping active"])
def test_gradients_match_finite_differences(projection, large):
    """The hand-written backward pass through time, for every input, the initial state and
    every weight, against central finite differences (float64, rows of three lengths)."""
    lstm = make_lstm(seed=3, projection=projection, large=large).double()
    names = [name for name, _ in lstm.named_parameters()]
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, INPUT, dtype=torch.float64, generator=generator, requires_grad=True)
    h0 = torch.randn(3, lstm.output_dim, dtype=torch.float64, generator=generator, requires_grad=True)
    c0 = torch.randn(3, lstm.cell_dim, dtype=torch.float64, generator=generator, requires_grad=True)
    batch_sizes = lengths_to_batch_sizes([5, 4, 2], 5)

    def run(x, h0, c0, *params):
        out, (h, c) = torch.func.functional_call(lstm, dict(zip(names, params)), (x, batch_sizes, (h0, c0)))
        return out, h, c

    params = [p.detach().clone().requires_grad_(True) for p in lstm.parameters()]
    assert torch.autograd.gradcheck(run, (x, h0, c0, *params), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64: the Python loops", "float32: the fused loops where built"])
def test_gradients_match_autograd_through_the_naive_cell(dtype):
    """With both clips active: the gradients of a weighted sum of outputs and final states
    equal autograd's through the per-row reference written from the equations."""
    lstm = make_lstm(seed=5).to(dtype)
    lengths = [6, 6, 3]
    x = torch.randn(3, 6, INPUT, dtype=dtype)
    weights = torch.randn(3, 6, lstm.output_dim, dtype=dtype)
    loss, clipped = 0.0, {"cell": 0, "proj": 0}
    for row, length in enumerate(lengths):
        outputs, (h, c), clips = naive_lstm(lstm, x[row, :length], differentiable=True)
        loss = loss + (outputs * weights[row, :length]).sum() + h.sum() + 2 * c.sum()
        clipped = {key: clipped[key] + clips[key] for key in clipped}
    assert clipped["cell"] and clipped["proj"]
    names = [name for name, _ in lstm.named_parameters()]
    reference = dict(zip(names, torch.autograd.grad(loss, list(lstm.parameters()))))
    out, (h, c) = lstm(x, lengths_to_batch_sizes(lengths, 6))
    ((out * weights).sum() + h.sum() + 2 * c.sum()).backward()
    tolerance = dict(rtol=1e-9, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    for name, param in lstm.named_parameters():
        torch.testing.assert_close(param.grad, reference[name].to(dtype), **tolerance, msg=name)


def test_grad_enabled_forward_matches_the_reference_and_the_no_grad_path_with_ragged_lengths():
    """The training path (`_TrainingTimeLoop`, taken whenever autograd records) computes the
    same outputs and final states as the per-row reference and as inference."""
    lstm = make_lstm(seed=7)
    lengths = [7, 5, 2]
    torch.manual_seed(3)
    x = torch.randn(3, 7, INPUT, requires_grad=True)
    batch_sizes = lengths_to_batch_sizes(lengths, 7)
    out, (h, c) = lstm(x, batch_sizes)
    assert out.requires_grad
    with torch.no_grad():
        plain_out, (plain_h, plain_c) = lstm(x, batch_sizes)
    # The training loop reads each step's h from the packed outputs, inference from its
    # state buffer: the BLAS may take another kernel for another alignment (a few ulps).
    torch.testing.assert_close(out, plain_out, rtol=0, atol=1e-5)
    torch.testing.assert_close(h, plain_h, rtol=0, atol=1e-5)
    torch.testing.assert_close(c, plain_c, rtol=0, atol=1e-5)
    clipped = {"cell": 0, "proj": 0}
    for row, length in enumerate(lengths):
        expected, (eh, ec), clips = naive_lstm(lstm, x[row, :length].detach())
        clipped = {key: clipped[key] + clips[key] for key in clipped}
        torch.testing.assert_close(out[row, :length].detach().double(), expected, atol=1e-5, rtol=1e-5)
        assert not out[row, length:].any()
        torch.testing.assert_close(h[row].detach().double(), eh, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(c[row].detach().double(), ec, atol=1e-5, rtol=1e-5)
    assert clipped["cell"] and clipped["proj"]


@pytest.mark.parametrize("lengths", [[5, 4, 2], [3, 3, 3], [6, 1], [4, 2, 0, 0]])
def test_packing_indexes_each_rows_previous_and_last_step(lengths):
    """Against a per-row walk: the packed row of each row at the previous step (initial
    states first) and at its last step."""
    from spacy_elmo.nn.lstm import _packing, _step_offsets

    time = max(lengths)
    batch_sizes = lengths_to_batch_sizes(lengths, time)
    packing = _packing(batch_sizes, torch.device("cpu"))
    offsets = _step_offsets(batch_sizes)
    expected_previous = []
    for t, n in enumerate(batch_sizes):
        expected_previous += [row if t == 0 else batch_sizes[0] + offsets[t - 1] + row for row in range(n)]
    assert packing.previous.tolist() == expected_previous
    running = [row for row, length in enumerate(lengths) if length]
    assert packing.last.tolist() == [offsets[lengths[row] - 1] + row for row in running]


def bf16_reference_loop(lstm, batch_sizes, input_gates, recurrent_t, projection, h0, c0):
    """The training loop's forward pass under bf16 autocast written plainly, for autograd:
    the recurrent and projection products take bf16 operands, the gates, cell, clipping and
    state are fp32. Packed input_gates (rows, 4H) -> packed outputs, final h, final c."""
    bf16 = torch.bfloat16
    h, c = h0.to(bf16), c0
    final_h, final_c = list(h0.unbind(0)), list(c0.unbind(0))
    outputs, offset = [], 0
    for n in batch_sizes:
        gates = input_gates[offset : offset + n] + (h[:n] @ recurrent_t.to(bf16)).float()
        i, f, g, o = gates.sigmoid().chunk(4, dim=1)
        cell = (f * c[:n] + i * (2 * g - 1)).clamp(-lstm.cell_clip, lstm.cell_clip)
        y = ((o * torch.tanh(cell)).to(bf16) @ projection.t().to(bf16)).float().clamp(-lstm.proj_clip, lstm.proj_clip)
        outputs.append(y)
        for row in range(n):
            final_h[row], final_c[row] = y[row], cell[row]
        h, c = torch.cat([y.to(bf16), h[n:]]), torch.cat([cell, c[n:]])
        offset += n
    return torch.cat(outputs), torch.stack(final_h), torch.stack(final_c)


@pytest.mark.parametrize("proj_clip", [3.0, 3.1], ids=["clip 3", "clip 3.1 (not a bf16 number)"])
def test_bf16_training_loop_gradients_match_autograd_through_the_same_bf16_forward(proj_clip):
    """Under bf16 autocast (input gates in bf16) the loop's products take bf16 operands.
    With both clips active, its outputs, final state and hand-written gradients match
    autograd through a plain loop making the same casts, to bf16 rounding (1%)."""
    from spacy_elmo.nn.lstm import _TrainingTimeLoop, packed_rows

    lstm = make_lstm(seed=9, proj_clip=proj_clip)
    lengths = [7, 6, 3, 1]
    batch_sizes = lengths_to_batch_sizes(lengths, 7)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(4, 7, INPUT, generator=generator)
    rows = packed_rows(batch_sizes, 4, x.device)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        weights = lstm._gate_weights()
        input_gates = lstm._input_gates(x.transpose(0, 1).reshape(28, INPUT).index_select(0, rows), weights)
    assert input_gates.dtype == torch.bfloat16
    inputs = (input_gates, weights[1].float(), lstm.projection.detach(), torch.randn(4, PROJ, generator=generator), torch.randn(4, CELL, generator=generator))
    out_weights = torch.randn(len(input_gates), PROJ, generator=generator)
    results, clipped = [], None

    def hand_written_loop(lstm, batch_sizes, *loop_inputs):
        """The loop of one layer (D = 1)."""
        outputs = _TrainingTimeLoop.apply(lstm, batch_sizes, *(t.unsqueeze(0) for t in loop_inputs))
        return [t[0] for t in outputs]

    for loop in (hand_written_loop, bf16_reference_loop):
        leaves = [t.clone().requires_grad_(True) for t in inputs]
        args = [leaves[0].float(), *leaves[1:]] if loop is bf16_reference_loop else leaves
        out, h, c = loop(lstm, batch_sizes, *args)
        ((out * out_weights).sum() + h.sum() + 2 * c.sum()).backward()
        results.append([out.detach(), h.detach(), c.detach()] + [leaf.grad.float() for leaf in leaves])
        clipped = (out.abs() >= proj_clip).sum()
    assert clipped > 0
    for hand, reference in zip(*results):
        assert (hand - reference).norm() <= 0.01 * reference.norm()


@pytest.mark.parametrize("given_state", [1, 0], ids=["second layer's state given", "first layer's state given"])
@pytest.mark.parametrize("projection", [PROJ, None], ids=["projected", "unprojected"])
@pytest.mark.parametrize("bf16", [False, True], ids=["fp64", "bf16 autocast"])
def test_layers_trained_in_one_loop_match_each_layer_trained_alone(projection, bf16, given_state):
    """`run_layers` trains two layers (a biLM layer's directions) in one time loop with
    batched products: the same outputs, final states and gradients (inputs, initial
    states, weights) as each layer's own training pass (D = 1; that pass is tested against
    a naive cell above), with both clips active, ragged lengths, and one layer's initial
    state given, the other's zero."""
    from spacy_elmo.nn.lstm import run_layers

    dtype = torch.float32 if bf16 else torch.float64
    layers = [make_lstm(seed, projection=projection).to(dtype) for seed in (11, 12)]
    lengths = [7, 6, 3, 1]
    batch_sizes = lengths_to_batch_sizes(lengths, 7)
    generator = torch.Generator().manual_seed(4)
    inputs = [torch.randn(4, 7, INPUT, generator=generator, dtype=dtype) for _ in layers]
    state = (torch.randn(4, layers[0].output_dim, generator=generator, dtype=dtype), torch.randn(4, CELL, generator=generator, dtype=dtype))
    out_weights = [torch.randn(4, 7, layers[0].output_dim, generator=generator, dtype=dtype) for _ in layers]
    results = []
    for together in (True, False):
        for layer in layers:
            layer.zero_grad()
        leaves = [x.clone().requires_grad_(True) for x in inputs]
        state_leaves = tuple(t.clone().requires_grad_(True) for t in state)
        states = [state_leaves if index == given_state else None for index in range(2)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if together:
                runs = run_layers(layers, leaves, batch_sizes, states)
            else:
                runs = [layer(x, batch_sizes, s) for layer, x, s in zip(layers, leaves, states)]
        loss = sum((out.float() * w).sum() + h.sum() + 2 * c.sum() for (out, (h, c)), w in zip(runs, out_weights))
        loss.backward()
        values = [t.detach() for out, (h, c) in runs for t in (out, h, c)]
        grads = [leaf.grad for leaf in leaves + list(state_leaves)] + [p.grad.clone() for layer in layers for p in layer.parameters()]
        results.append((values, grads))
    final_cells = [c for _, (_, c) in runs]
    assert all((c.abs() >= 3.0 - 1e-6).any() for c in final_cells)  # the cell clip is active
    assert projection is None or all((out.abs() >= 3.0 - 1e-6).any() for out, _ in runs)  # and the projection clip
    tolerance = dict(rtol=1e-3, atol=1e-3) if bf16 else dict(rtol=1e-10, atol=1e-12)
    for together, alone in zip(results[0][0] + results[0][1], results[1][0] + results[1][1]):
        torch.testing.assert_close(together, alone, **tolerance)


def test_layers_of_other_shapes_or_clips_are_not_trained_in_one_loop():
    from spacy_elmo.nn.lstm import run_layers

    layers = [make_lstm(0), make_lstm(1, cell_clip=2.0)]
    x = torch.randn(2, 3, INPUT)
    for grad in (True, False):
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match="same kind, shapes and clips"):
            run_layers(layers, [x, x], [2, 2, 1], [None, None])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32 (the compiled loop where built)"])
def test_weight_drop_trains_the_layers_with_their_recurrent_weights_masked(dtype):
    """`weight_drop` in the training loop: the same outputs and gradients as training
    copies of the layers whose recurrent weights are zeroed by one mask for the whole
    batch and every step and the rest scaled by 1 / (1 - rate) (the recurrent weights'
    gradients are the copies' times that mask); without autograd it changes nothing."""
    from spacy_elmo.nn.lstm import run_layers

    rate = 0.4
    layers = [make_lstm(seed, projection=PROJ).to(dtype) for seed in (21, 22)]
    lengths = [5, 4, 2]
    batch_sizes = lengths_to_batch_sizes(lengths, 5)
    generator = torch.Generator().manual_seed(3)
    inputs = [torch.randn(3, 5, INPUT, generator=generator, dtype=dtype) for _ in layers]
    torch.manual_seed(7)  # the mask `run_layers` draws: dropout of its stacked (D, P, 4H) recurrent weights
    kept = torch.nn.functional.dropout(torch.ones(2, PROJ, 4 * CELL, dtype=dtype), rate)
    assert 0 < int((kept == 0).sum()) < kept.numel()
    masked = [make_lstm(seed, projection=PROJ).to(dtype) for seed in (21, 22)]
    with torch.no_grad():
        for copy, mask in zip(masked, kept):
            copy.recurrent_weight.mul_(mask.t())
    tolerance = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    results = []
    for run_with, drop in ((layers, rate), (masked, 0.0)):
        torch.manual_seed(7)
        leaves = [x.clone().requires_grad_(True) for x in inputs]
        runs = run_layers(run_with, leaves, batch_sizes, [None, None], weight_drop=drop)
        sum((out * (index + 1)).sum() + h.sum() for index, (out, (h, _)) in enumerate(runs)).backward()
        results.append(([out.detach() for out, _ in runs], [leaf.grad for leaf in leaves], [dict(layer.named_parameters()) for layer in run_with]))
    (dropped_out, dropped_grads, dropped_params), (masked_out, masked_grads, masked_params) = results
    for ours, reference in zip(dropped_out + dropped_grads, masked_out + masked_grads):
        torch.testing.assert_close(ours, reference, **tolerance)
    for ours, reference, mask in zip(dropped_params, masked_params, kept):
        for name in ("input_weight", "bias", "projection"):
            torch.testing.assert_close(ours[name].grad, reference[name].grad, **tolerance)
        torch.testing.assert_close(ours["recurrent_weight"].grad, reference["recurrent_weight"].grad * mask.t(), **tolerance)
    with torch.no_grad():
        plain = run_layers(layers, inputs, batch_sizes, [None, None])
        dropped = run_layers(layers, inputs, batch_sizes, [None, None], weight_drop=rate)
    for (ours, _), (reference, _) in zip(dropped, plain):
        torch.testing.assert_close(ours, reference, rtol=0, atol=0)
