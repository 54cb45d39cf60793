"""ScalarMix: gamma * sum_j softmax(s)_j * h_j, with learnable s and gamma."""

import math

import pytest
import torch

from spacy_elmo.nn.scalar_mix import ScalarMix


def explicit_mix(layers, scalars, gamma):
    exps = [math.exp(s) for s in scalars]
    total = sum(exps)
    out = torch.zeros_like(layers[0], dtype=torch.float64)
    for j, e in enumerate(exps):
        out += (e / total) * layers[j].double()
    return gamma * out


def test_equals_gamma_times_softmax_weighted_sum():
    torch.manual_seed(0)
    layers = torch.randn(3, 2, 4, 5)
    mix = ScalarMix(3, initial_scalars=[0.1, -0.5, 2.0], gamma=0.7)
    with torch.no_grad():
        got = mix(layers)
    assert got.shape == (2, 4, 5)
    torch.testing.assert_close(got.double(), explicit_mix(layers, [0.1, -0.5, 2.0], 0.7), atol=1e-6, rtol=1e-6)


def test_default_is_the_plain_mean():
    torch.manual_seed(1)
    layers = torch.randn(4, 7, 3)
    with torch.no_grad():
        got = ScalarMix(4)(layers)
    torch.testing.assert_close(got, layers.mean(dim=0), atol=1e-6, rtol=1e-6)


def test_shift_invariance_of_scalars_and_linearity_in_gamma():
    torch.manual_seed(2)
    layers = torch.randn(3, 6)
    with torch.no_grad():
        a = ScalarMix(3, [1.0, 2.0, 3.0], gamma=1.0)(layers)
        b = ScalarMix(3, [11.0, 12.0, 13.0], gamma=1.0)(layers)
        c = ScalarMix(3, [1.0, 2.0, 3.0], gamma=-2.5)(layers)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(c, -2.5 * a, atol=1e-6, rtol=1e-6)


def test_one_dominant_scalar_selects_that_layer():
    layers = torch.randn(3, 4, 5)
    with torch.no_grad():
        got = ScalarMix(3, [-50.0, 50.0, -50.0], gamma=2.0)(layers)
    torch.testing.assert_close(got, 2.0 * layers[1], atol=1e-5, rtol=1e-5)


def test_parameters_are_learnable():
    mix = ScalarMix(3, [0.5, 0.0, -0.5], gamma=1.5)
    names = dict(mix.named_parameters())
    assert set(names) == {"scalars", "gamma"}
    assert names["scalars"].tolist() == [0.5, 0.0, -0.5]
    assert names["gamma"].item() == 1.5


def test_gradients_flow_to_scalars_and_gamma():
    torch.manual_seed(3)
    scalars, gamma = [0.3, -0.2, 0.9], 1.3
    layers = torch.randn(3, 2, 5)
    mix = ScalarMix(3, scalars, gamma)
    mix(layers).sum().backward()
    # analytic: S_j = sum(h_j); d/dgamma = sum_j w_j S_j; d/ds_k = gamma * w_k * (S_k - sum_j w_j S_j)
    exps = [math.exp(s) for s in scalars]
    w = [e / sum(exps) for e in exps]
    sums = [float(layers[j].double().sum()) for j in range(3)]
    mean = sum(wj * sj for wj, sj in zip(w, sums))
    assert mix.gamma.grad is not None
    assert mix.gamma.grad.item() == pytest.approx(mean, rel=1e-5, abs=1e-5)
    expected = [gamma * w[k] * (sums[k] - mean) for k in range(3)]
    assert mix.scalars.grad.tolist() == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert mix.scalars.grad.abs().sum() > 0


def test_gradients_flow_to_the_layers():
    layers = torch.randn(2, 3, requires_grad=True)
    mix = ScalarMix(2, [0.0, math.log(3.0)], gamma=2.0)
    mix(layers).sum().backward()
    torch.testing.assert_close(layers.grad, torch.tensor([[0.5] * 3, [1.5] * 3]), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("scalars", [[0.0], [0.0, 1.0, 2.0, 3.0], []])
def test_wrong_number_of_initial_scalars_raises(scalars):
    with pytest.raises(ValueError, match="initial scalars"):
        ScalarMix(3, initial_scalars=scalars)


def test_wrong_number_of_layers_in_input_raises():
    with pytest.raises(RuntimeError):
        ScalarMix(3)(torch.randn(2, 4, 5))
