"""Opt-in bf16 and int8 inference: close to fp32, never confused with it."""

import json

import pytest
import spacy
import torch

from spacy_elmo.io import load_model, load_public_model
from spacy_elmo.nn.embedder import Embedder
from spacy_elmo.nn.precision import check_precision, runtime_bilm


def golden_sentences(directory):
    groups = json.loads((directory / "sentences.json").read_text())
    return [sentence.split() for group in groups for sentence in group]


@pytest.mark.parametrize("precision,min_cosine", [("bf16", 0.995), ("int8", 0.98)])
def test_approximate_modes_stay_close_to_fp32(allennlp_fixture, precision, min_cosine):
    bilm = load_public_model(allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5")
    sentences = golden_sentences(allennlp_fixture)
    exact = Embedder(bilm)(sentences)
    approximate = Embedder(bilm, precision=precision)(sentences)
    assert approximate.layers.dtype == torch.float32
    rows = exact.mask
    a, b = exact.layers[:, rows], approximate.layers[:, rows]
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    assert cosine.mean() > min_cosine
    assert (a - b).abs().max() > 1e-4  # really a different computation


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_approximate_copies_leave_the_original_model_untouched(allennlp_fixture, precision):
    bilm = load_public_model(allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5")
    before = {name: value.clone() for name, value in bilm.state_dict().items()}
    runtime = runtime_bilm(bilm, precision)
    assert runtime is not bilm
    for name, value in bilm.state_dict().items():
        assert torch.equal(value, before[name]), name
        assert value.dtype == torch.float32 or not value.is_floating_point()
    assert runtime_bilm(bilm, "fp32") is bilm


def test_int8_model_runs_its_int8_loop_whatever_the_grad_mode(allennlp_fixture):
    """Its products are not differentiable: with autograd recording it still runs its
    int8 inference loop (not the fp32 training loop over the original weights)."""
    bilm = load_public_model(allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5")
    int8 = runtime_bilm(bilm, "int8")
    sentences = golden_sentences(allennlp_fixture)[:3]
    ids, lengths = int8.input_ids(sentences), [len(s) for s in sentences]
    with torch.no_grad():
        expected = int8(ids, lengths).layers
        fp32 = bilm(ids, lengths).layers
    recorded = int8(ids, lengths).layers
    torch.testing.assert_close(recorded, expected, rtol=0, atol=1e-6)
    assert (recorded - fp32).abs().max() > 1e-4


def test_bad_precision_settings():
    with pytest.raises(ValueError, match="precision must be one of"):
        check_precision("fp8", torch.device("cpu"))
    with pytest.raises(ValueError, match="CPU only"):
        check_precision("int8", torch.device("cuda:0"))


def test_component_in_bf16_saves_exact_weights(tiny_model_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "precision": "bf16"})
    doc = nlp("the bank of the river")
    assert doc._.elmo.layers.dtype == "float32"
    nlp.to_disk(tmp_path / "pipeline")
    saved, original = load_model(tmp_path / "pipeline" / "elmo"), load_model(tiny_model_dir)
    for (name, a), (_, b) in zip(saved.state_dict().items(), original.state_dict().items()):
        assert torch.equal(a, b), name
    assert spacy.load(tmp_path / "pipeline").get_pipe("elmo").settings.precision == "bf16"


def test_bf16_copy_keeps_the_warm_state_in_float32():
    from elmo_testing import random_bilm
    from spacy_elmo.nn.warm_state import with_warm_state

    warm = with_warm_state(random_bilm(), [["a", "b"], ["c"]])
    half = runtime_bilm(warm, "bf16")
    assert half.token_encoder.char_embedding.weight.dtype == torch.bfloat16
    assert half.warm_h.dtype == torch.float32 and half.warm_c.dtype == torch.float32


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_clear_picks_up_changed_weights(precision):
    from elmo_testing import random_bilm

    bilm = random_bilm()
    embedder = Embedder(bilm, precision=precision)
    before = embedder([["bank"]]).layers
    with torch.no_grad():
        bilm.token_encoder.char_embedding.weight.mul_(3.0)
    embedder.clear()
    assert (embedder([["bank"]]).layers - before).abs().max() > 1e-2
