"""The warm initial state: deterministic, batch-independent, closer to the references."""

import json

import h5py
import numpy
import pytest
import torch

from elmo_testing import random_bilm
from spacy_elmo.io import load_model, load_public_model, save_model
from spacy_elmo.nn.embedder import Embedder
from spacy_elmo.nn.warm_state import with_warm_state

WARM_UP = [["It", "was", "a", "cold", "day", "."], ["The", "market", "opened", "late", "."], ["We", "walked", "home", "."]]


def test_same_doc_same_vectors_alone_and_in_any_batch(tmp_path):
    warm = with_warm_state(random_bilm(), WARM_UP, rows=2)
    save_model(warm, tmp_path / "warm")
    embedder = Embedder(load_model(tmp_path / "warm"))
    target = ["the", "bank", "of", "the", "river"]
    alone = embedder([target]).layers[:, 0]
    for others in ([["x"]], [["a", "b", "c", "d", "e", "f", "g"], ["y"]], [target] * 5):
        batched = embedder(others + [target]).layers[:, len(others), : len(target)]
        torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(embedder([target]).layers[:, 0], alone, rtol=0, atol=0)


def test_warm_state_changes_outputs_and_is_stored(tmp_path):
    bilm = random_bilm()
    warm = with_warm_state(bilm, WARM_UP)
    assert warm.config.warm_state and not bilm.config.warm_state
    assert warm.warm_h.abs().sum() > 0 and warm.warm_c.abs().sum() > 0
    cold_out, warm_out = Embedder(bilm)([["bank"]]).layers, Embedder(warm)([["bank"]]).layers
    torch.testing.assert_close(cold_out[0], warm_out[0])  # layer 0 is context-free
    assert (cold_out[1:] - warm_out[1:]).abs().max() > 1e-3
    save_model(warm, tmp_path / "warm")
    reloaded = load_model(tmp_path / "warm")
    assert torch.equal(reloaded.warm_h, warm.warm_h) and torch.equal(reloaded.warm_c, warm.warm_c)


def test_warm_state_is_the_mean_final_state_of_the_warm_up_rows():
    from spacy_elmo.nn import StatefulBiLM, batch_to_char_ids

    bilm = random_bilm()
    warm = with_warm_state(bilm, WARM_UP[:2], rows=2)
    runner = StatefulBiLM(bilm)
    with torch.no_grad():
        runner(torch.from_numpy(batch_to_char_ids(WARM_UP[:2])), [6, 5])
    for d in range(2):
        for layer in range(2):
            torch.testing.assert_close(warm.warm_h[d, layer], runner.state[d][layer][0].mean(0))
            torch.testing.assert_close(warm.warm_c[d, layer], runner.state[d][layer][1].mean(0))


def test_empty_warm_up_text_is_rejected():
    with pytest.raises(ValueError, match="at least one non-empty sentence"):
        with_warm_state(random_bilm(), [[], []])


def test_warm_vectors_are_closer_to_the_stateful_reference_than_cold_ones(allennlp_fixture):
    """The fixtures were recorded with state carried across batches: batches 1..9 are
    'warm'. A warm state from other text reproduces them far better than a zero state."""
    bilm = load_public_model(allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5")
    groups = json.loads((allennlp_fixture / "sentences.json").read_text())
    warm_up = [s.split() for s in groups[0][:1] + groups[1][:1] + groups[2][:1]]  # batch 0: not compared
    cold, warm = Embedder(bilm), Embedder(with_warm_state(bilm, warm_up * 4, rows=3))
    cold_error, warm_error = [], []
    for group in range(3):
        with h5py.File(allennlp_fixture / f"lm_embeddings_{group}.hdf5", "r") as handle:
            for index in range(1, 10):
                tokens = groups[group][index].split()
                expected = numpy.concatenate(handle[str(index)][...], axis=1)[: len(tokens)]
                cold_error.append(numpy.abs(cold([tokens]).layers[2, 0].numpy() - expected).mean())
                warm_error.append(numpy.abs(warm([tokens]).layers[2, 0].numpy() - expected).mean())
    assert numpy.mean(warm_error) < numpy.mean(cold_error) / 3
