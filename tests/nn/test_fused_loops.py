"""The compiled training time loops (nn/fused_loops.py) against the Python loops of
nn/lstm.py, which are tested against a naive cell and finite differences; and the
fallback to the Python loops where the compiled ones cannot run."""

import logging
import os

import pytest
import torch

from spacy_elmo.nn import fused_loops as fused_module
from spacy_elmo.nn import lstm as lstm_module
from spacy_elmo.nn.lstm import ProjectedLSTM, run_layers


@pytest.fixture(scope="module")
def fused():
    loops = fused_module.fused_loops()
    if loops is None:
        pytest.skip("the fused LSTM loops cannot be built here (no C++ compiler or ninja, or SPACY_ELMO_FUSED_LOOPS=0)")
    return loops


@pytest.fixture
def uncached():
    """fused_loops() decides afresh in the test, and again after it."""
    fused_module.fused_loops.cache_clear()
    yield
    fused_module.fused_loops.cache_clear()


def layer_pair_gradients(layers, inputs, batch_sizes, states, weights, use_fused, monkeypatch, bf16=False):
    """Outputs, final states and every gradient of a weighted sum of them, for two layers
    trained in one loop (a biLM layer's directions), with or without the fused loops; and
    how many times the fused forward loop ran."""
    calls = []
    if use_fused:
        loops = fused_module.fused_loops()

        class Counting:
            def record_loop(self, *args):
                calls.append(1)
                return loops.record_loop(*args)

            backward_loop = staticmethod(loops.backward_loop)

        monkeypatch.setattr(lstm_module, "fused_loops", lambda: Counting())
    else:
        monkeypatch.setattr(lstm_module, "fused_loops", lambda: None)
    for layer in layers:
        layer.zero_grad()
    leaves = [x.clone().requires_grad_(True) for x in inputs] + [t.clone().requires_grad_(True) for state in states for t in state]
    given = [(leaves[2], leaves[3]), (leaves[4], leaves[5])]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        results = run_layers(layers, leaves[:2], batch_sizes, given)
    loss = sum((out * w_out).sum() + (h * w_h).sum() + (c * w_c).sum() for (out, (h, c)), (w_out, w_h, w_c) in zip(results, weights))
    loss.backward()
    values = [t.detach() for out, (h, c) in results for t in (out, h, c)]
    values += [leaf.grad for leaf in leaves] + [param.grad for layer in layers for param in layer.parameters()]
    monkeypatch.undo()
    return values, len(calls)


def two_layers(projection, clip, seed=0):
    torch.manual_seed(seed)
    layers = [ProjectedLSTM(10, 32, projection, cell_clip=clip, proj_clip=clip) for _ in range(2)]
    with torch.no_grad():  # weights large enough that clips bite
        for layer in layers:
            for param in layer.parameters():
                param.normal_(0.0, 0.4)
    lengths = [9, 9, 7, 4, 4, 1]
    batch_sizes = [sum(1 for length in lengths if length > t) for t in range(9)]
    out = projection or 32
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = [torch.randn(6, 9, 10, generator=generator) for _ in range(2)]
    states = [(torch.randn(6, out, generator=generator), torch.randn(6, 32, generator=generator)) for _ in range(2)]
    weights = [tuple(torch.randn(*shape, generator=generator) for shape in ((6, 9, out), (6, out), (6, 32))) for _ in range(2)]
    return layers, inputs, batch_sizes, states, weights


@pytest.mark.parametrize("clip", [0.8, None], ids=["clipped", "no clips"])
@pytest.mark.parametrize("projection", [8, None], ids=["projected", "unprojected"])
def test_fused_loops_give_the_python_loops_outputs_and_gradients_in_float32(fused, monkeypatch, projection, clip):
    layers, inputs, batch_sizes, states, weights = two_layers(projection, clip)
    python, python_calls = layer_pair_gradients(layers, inputs, batch_sizes, states, weights, False, monkeypatch)
    compiled, compiled_calls = layer_pair_gradients(layers, inputs, batch_sizes, states, weights, True, monkeypatch)
    assert (python_calls, compiled_calls) == (0, 1)
    if clip is not None:
        assert (python[3].abs() >= clip).any() or projection is None  # the projection clip bites
    for reference, value in zip(python, compiled):
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-5 * float(reference.abs().max()))


@pytest.mark.parametrize("projection", [8, None], ids=["projected", "unprojected"])
def test_fused_loops_under_bf16_autocast_stay_as_close_to_float32_as_the_python_loops(fused, monkeypatch, projection):
    """bf16 products round differently in the two loops' float32 arithmetic, so they are
    compared through their distance from the float32 gradients."""
    layers, inputs, batch_sizes, states, weights = two_layers(projection, 0.8)
    reference, _ = layer_pair_gradients(layers, inputs, batch_sizes, states, weights, False, monkeypatch)
    python, _ = layer_pair_gradients(layers, inputs, batch_sizes, states, weights, False, monkeypatch, bf16=True)
    compiled, calls = layer_pair_gradients(layers, inputs, batch_sizes, states, weights, True, monkeypatch, bf16=True)
    assert calls == 1
    for exact, plain, value in zip(reference, python, compiled):
        scale = float(exact.norm())
        assert float((value.float() - exact).norm()) <= 2 * float((plain.float() - exact).norm()) + 1e-3 * scale


def test_saturated_gates_give_the_python_loops_results_not_nan(fused, monkeypatch):
    """Gate pre-activations far beyond exp's float32 range (|z| in the hundreds): sigmoids
    of exactly 0 and 1, finite outputs and gradients, as in the Python loops."""
    layers, inputs, batch_sizes, states, weights = two_layers(8, 3.0)
    with torch.no_grad():
        for layer in layers:
            layer.input_weight.mul_(100.0)
    python, _ = layer_pair_gradients(layers, inputs, batch_sizes, states, weights, False, monkeypatch)
    compiled, _ = layer_pair_gradients(layers, inputs, batch_sizes, states, weights, True, monkeypatch)
    for reference, value in zip(python, compiled):
        assert torch.isfinite(value).all()
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-5 * float(reference.abs().max()))


def test_switched_off_fused_loops_leave_training_to_the_python_loops(uncached, monkeypatch):
    monkeypatch.setenv(fused_module.DISABLE_VARIABLE, "0")
    assert fused_module.fused_loops() is None
    layers, inputs, batch_sizes, states, weights = two_layers(8, 0.8)
    values, calls = layer_pair_gradients(layers, inputs, batch_sizes, states, weights, False, monkeypatch)
    assert calls == 0 and all(torch.isfinite(v).all() for v in values)


def test_a_failed_build_is_logged_and_leaves_the_python_loops(uncached, monkeypatch, caplog):
    import torch.utils.cpp_extension

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Error building extension: c++: command not found")

    monkeypatch.delenv(fused_module.DISABLE_VARIABLE, raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", no_compiler)
    with caplog.at_level(logging.WARNING, logger=fused_module.__name__):
        assert fused_module.fused_loops() is None
    assert "could not be built" in caplog.text and "command not found" in caplog.text


def test_each_cpu_gets_its_own_build(monkeypatch):
    """A build for one CPU's instructions (-march=native) is never loaded on another that
    shares the cache folder."""
    monkeypatch.setattr(fused_module, "_cpu_features", lambda: "flags : fpu avx2")
    avx2 = fused_module._build_key()
    monkeypatch.setattr(fused_module, "_cpu_features", lambda: "flags : fpu avx2 avx512f avx512_bf16")
    assert fused_module._build_key() != avx2


def test_the_ninja_package_is_found_without_an_activated_environment(monkeypatch):
    ninja = pytest.importorskip("ninja")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(fused_module.shutil, "which", lambda name: None)
    fused_module._put_ninja_on_path()
    assert os.environ["PATH"].split(os.pathsep) == [ninja.BIN_DIR, "/nonexistent"]
