"""Under bf16 autocast on the CPU, training products run over row counts rounded up to
`ROW_MULTIPLE`, so their shapes recur from batch to batch; in fp32 and in inference they
run over the exact counts. Padding rows must not change values or gradients: checked here
for the LSTM loop with NaN padding, and by the naive references of the LSTM, token encoder
and softmax tests."""

import contextlib
from typing import Callable, Set

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from elmo_testing import TINY_SETTINGS
from spacy_elmo.nn.chars import batch_to_char_ids
from spacy_elmo.nn.config import BiLMConfig
from spacy_elmo.nn.lstm import ProjectedLSTM, _TrainingTimeLoop
from spacy_elmo.nn.shapes import ROW_MULTIPLE, pad_rows, repeat_first_row, rounded_rows, rounding_pays
from spacy_elmo.nn.softmax import SampledSoftmax
from spacy_elmo.nn.token_encoder import TokenEncoder

PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default}
ROWS = 37  # a count no dimension of the small modules below shares
PRECISIONS = ["bf16", "fp32"]


class ProductDims(TorchDispatchMode):
    """Collects every dimension of every matrix product's operands."""

    def __init__(self) -> None:
        super().__init__()
        self.dims: Set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in PRODUCTS:
            self.dims.update(dim for arg in args if isinstance(arg, torch.Tensor) for dim in arg.shape)
        return func(*args, **(kwargs or {}))


def product_dims(work: Callable[[], torch.Tensor], precision: str, train: bool) -> Set[int]:
    """The dimensions of the products `work` runs in `precision`: forward and backward when
    `train`, else forward without gradients."""
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with ProductDims() as mode:
        with autocast:
            if train:
                loss = work().float().sum()
            else:
                with torch.no_grad():
                    work()
        if train:
            loss.backward()
    return mode.dims


def assert_rounded_only_in_bf16(dims: Set[int], precision: str) -> None:
    if precision == "bf16":
        assert rounded_rows(ROWS) in dims and ROWS not in dims
    else:
        assert ROWS in dims and rounded_rows(ROWS) not in dims


def test_rounded_rows():
    assert [rounded_rows(n) for n in (0, 1, ROW_MULTIPLE, ROW_MULTIPLE + 1)] == [0, ROW_MULTIPLE, ROW_MULTIPLE, 2 * ROW_MULTIPLE]


def test_pad_rows_appends_zero_rows():
    x = torch.randn(3, 2)
    padded = pad_rows(x, 5)
    assert padded.shape == (5, 2)
    assert torch.equal(padded[:3], x) and not padded[3:].any()
    assert pad_rows(x, 3) is x


def test_repeat_first_row_appends_copies_of_it():
    x = torch.tensor([[4, 1], [2, 2], [7, 3]])
    padded = repeat_first_row(x, 6)
    assert padded.tolist() == [[4, 1], [2, 2], [7, 3], [4, 1], [4, 1], [4, 1]]
    assert repeat_first_row(x, 3) is x


def test_rounding_pays_under_cpu_bf16_autocast_only():
    cpu = torch.device("cpu")
    assert not rounding_pays(cpu)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert rounding_pays(cpu)
        assert not rounding_pays(torch.device("cuda"))
    with torch.autocast("cpu", dtype=torch.float16):
        assert not rounding_pays(cpu)


def lstm_work(train: bool) -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    lstm = ProjectedLSTM(5, 12, 6, 3.0, 3.0)
    batch_sizes = [7, 7, 6, 6, 5, 3, 2, 1]  # 37 packed rows
    assert sum(batch_sizes) == ROWS
    inputs = torch.randn(7, len(batch_sizes), 5, requires_grad=train)
    return lambda: lstm(inputs, batch_sizes)[0]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_lstm_training_products_run_over_rounded_packed_rows_in_bf16(precision):
    assert_rounded_only_in_bf16(product_dims(lstm_work(True), precision, train=True), precision)


def test_lstm_inference_products_run_over_the_packed_rows():
    dims = product_dims(lstm_work(False), "bf16", train=False)
    assert ROWS in dims and rounded_rows(ROWS) not in dims


def encoder_work() -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    encoder = TokenEncoder(BiLMConfig(**TINY_SETTINGS))
    words = [f"w{i}" for i in range(ROWS)] * 2  # 37 distinct tokens, each twice
    ids = torch.from_numpy(batch_to_char_ids([words]))[0]
    return lambda: encoder(ids)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_token_encoder_training_products_run_over_rounded_distinct_tokens_in_bf16(precision):
    assert_rounded_only_in_bf16(product_dims(encoder_work(), precision, train=True), precision)


def test_token_encoder_inference_products_run_over_the_distinct_tokens():
    dims = product_dims(encoder_work(), "bf16", train=False)
    assert ROWS in dims and rounded_rows(ROWS) not in dims


@pytest.mark.parametrize("precision", PRECISIONS)
def test_sampled_softmax_product_runs_over_rounded_rows_in_bf16(precision):
    """Its forward product, the one autocast runs in bf16 (its backward products are fp32)."""
    torch.manual_seed(0)
    head = SampledSoftmax(6, 500, n_samples=20).train()
    hidden = torch.randn(ROWS, 6)
    targets = torch.randint(0, 500, (ROWS,))
    assert_rounded_only_in_bf16(product_dims(lambda: head(hidden, targets), precision, train=False), precision)


@pytest.mark.parametrize("gate_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16 products"])
def test_padding_rows_of_the_training_loop_are_ignored_and_get_zero_gradients(gate_dtype):
    """Input gates padded with NaN rows: the same outputs and final state as without
    padding, the same gradients (up to rounding: the weight gradients sum over more rows),
    and exactly zero gradients at the padding."""
    torch.manual_seed(3)
    lstm = ProjectedLSTM(5, 12, 6, 3.0, 3.0)
    batch_sizes = [4, 4, 3, 3, 1]
    rows = sum(batch_sizes)
    gates = torch.randn(rows, 48).to(gate_dtype)
    padded_gates = torch.cat([gates, torch.full((rounded_rows(rows) - rows, 48), float("nan"), dtype=gate_dtype)])
    h0, c0 = torch.randn(4, 6), torch.randn(4, 12)
    out_weights = torch.randn(rows, 6)
    results = []
    for input_gates in (gates, padded_gates):
        leaves = [t.clone().requires_grad_(True) for t in (input_gates, lstm._gate_weights()[1].detach(), lstm.projection.detach(), h0, c0)]
        out, h, c = (t[0] for t in _TrainingTimeLoop.apply(lstm, batch_sizes, *(leaf.unsqueeze(0) for leaf in leaves)))
        ((out * out_weights).sum() + h.sum() + 2 * c.sum()).backward()
        results.append(([out, h, c], [leaf.grad for leaf in leaves]))
    (plain_values, plain_grads), (padded_values, padded_grads) = results
    for plain, padded in zip(plain_values, padded_values):
        torch.testing.assert_close(padded, plain, atol=0, rtol=0)
    assert torch.equal(padded_grads[0][rows:], torch.zeros_like(padded_grads[0][rows:]))
    torch.testing.assert_close(padded_grads[0][:rows], plain_grads[0], atol=0, rtol=0)
    tolerance = 1e-5 if gate_dtype == torch.float32 else 1e-2
    for plain, padded in zip(plain_grads[1:], padded_grads[1:]):
        torch.testing.assert_close(padded, plain, atol=tolerance, rtol=tolerance)
