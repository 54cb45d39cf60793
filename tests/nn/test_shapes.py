"""Training products run over row counts rounded up to `ROW_MULTIPLE`, so their shapes recur
from batch to batch; inference runs over the exact counts. Values and gradients with the
padding are checked against naive references in the LSTM, token encoder and softmax tests."""

from typing import Callable, Set

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from elmo_testing import TINY_SETTINGS
from spacy_elmo.nn.chars import batch_to_char_ids
from spacy_elmo.nn.config import BiLMConfig
from spacy_elmo.nn.lstm import ProjectedLSTM
from spacy_elmo.nn.shapes import ROW_MULTIPLE, pad_index, pad_rows, rounded_rows
from spacy_elmo.nn.softmax import SampledSoftmax
from spacy_elmo.nn.token_encoder import TokenEncoder

PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}
ROWS = 37  # a count no dimension of the small modules below shares


class ProductDims(TorchDispatchMode):
    """Collects every dimension of every matrix product's operands."""

    def __init__(self) -> None:
        super().__init__()
        self.dims: Set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in PRODUCTS:
            self.dims.update(dim for arg in args if isinstance(arg, torch.Tensor) for dim in arg.shape)
        return func(*args, **(kwargs or {}))


def product_dims(work: Callable[[], torch.Tensor], train: bool) -> Set[int]:
    """The dimensions of the products `work` runs: forward and backward when `train`, else
    forward without gradients."""
    with ProductDims() as mode:
        if train:
            work().sum().backward()
        else:
            with torch.no_grad():
                work()
    return mode.dims


def test_rounded_rows():
    assert [rounded_rows(n) for n in (0, 1, ROW_MULTIPLE, ROW_MULTIPLE + 1)] == [0, ROW_MULTIPLE, ROW_MULTIPLE, 2 * ROW_MULTIPLE]


def test_pad_rows_appends_zero_rows():
    x = torch.randn(3, 2)
    padded = pad_rows(x, 5)
    assert padded.shape == (5, 2)
    assert torch.equal(padded[:3], x) and not padded[3:].any()
    assert pad_rows(x, 3) is x


def test_pad_index_repeats_the_first_index():
    index = torch.tensor([4, 2, 7])
    padded = pad_index(index)
    assert len(padded) == ROW_MULTIPLE
    assert padded[:3].tolist() == [4, 2, 7] and (padded[3:] == 4).all()
    assert pad_index(torch.arange(ROW_MULTIPLE)).tolist() == list(range(ROW_MULTIPLE))
    assert (pad_index(torch.zeros(0, dtype=torch.long)) == 0).all()


def lstm_work(train: bool) -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    lstm = ProjectedLSTM(5, 12, 6, 3.0, 3.0)
    batch_sizes = [7, 7, 6, 6, 5, 3, 2, 1]  # 37 packed rows
    assert sum(batch_sizes) == ROWS
    inputs = torch.randn(7, len(batch_sizes), 5, requires_grad=train)
    return lambda: lstm(inputs, batch_sizes)[0]


def test_lstm_training_products_run_over_rounded_packed_rows():
    dims = product_dims(lstm_work(True), train=True)
    assert rounded_rows(ROWS) in dims and ROWS not in dims


def test_lstm_inference_products_run_over_the_packed_rows():
    dims = product_dims(lstm_work(False), train=False)
    assert ROWS in dims and rounded_rows(ROWS) not in dims


def encoder_work() -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    encoder = TokenEncoder(BiLMConfig(**TINY_SETTINGS))
    words = [f"w{i}" for i in range(ROWS)] * 2  # 37 distinct tokens, each twice
    ids = torch.from_numpy(batch_to_char_ids([words]))[0]
    return lambda: encoder(ids)


def test_token_encoder_training_products_run_over_rounded_distinct_tokens():
    dims = product_dims(encoder_work(), train=True)
    assert rounded_rows(ROWS) in dims and ROWS not in dims


def test_token_encoder_inference_products_run_over_the_distinct_tokens():
    dims = product_dims(encoder_work(), train=False)
    assert ROWS in dims and rounded_rows(ROWS) not in dims


def test_sampled_softmax_product_runs_over_rounded_rows():
    """Its forward product, which autocast runs in bf16 (its backward products are fp32)."""
    torch.manual_seed(0)
    head = SampledSoftmax(6, 500, n_samples=20).train()
    hidden = torch.randn(ROWS, 6)
    targets = torch.randint(0, 500, (ROWS,))
    dims = product_dims(lambda: head(hidden, targets), train=False)
    assert rounded_rows(ROWS) in dims and ROWS not in dims
