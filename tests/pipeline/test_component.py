"""The `elmo` component: what it stores on docs, its settings and its batching."""

import numpy
import pytest
import spacy
import torch

from spacy_elmo.batching import token_budget_batches
from spacy_elmo.io import ModelFileError
from spacy_elmo.pipeline.component import ElmoComponent
from spacy_elmo.pipeline.config import LayerMix
from spacy_elmo.pipeline.segments import Segment, doc_segments, windows

TEXT = "I sat by the bank of the river."


def reference_layers(component: ElmoComponent, words) -> numpy.ndarray:
    """The biLM run directly on one sentence: (n_layers + 1, n_words, 2P)."""
    from spacy_elmo.nn import batch_to_char_ids

    with torch.no_grad():
        return component.bilm(torch.from_numpy(batch_to_char_ids([words])), [len(words)]).layers[:, 0].numpy()


def test_doc_token_and_span_vectors(nlp):
    doc = nlp(TEXT)
    component = nlp.get_pipe("elmo")
    layers = doc._.elmo.layers
    assert layers.shape == (3, len(doc), 12) and layers.dtype == numpy.float32
    numpy.testing.assert_allclose(layers, reference_layers(component, [t.text for t in doc]), atol=1e-6)
    numpy.testing.assert_allclose(doc._.elmo.mixed, layers.mean(axis=0), atol=1e-6)
    numpy.testing.assert_array_equal(doc[4]._.elmo, doc._.elmo.mixed[4])
    numpy.testing.assert_allclose(doc[2:5]._.elmo, doc._.elmo.mixed[2:5].mean(axis=0), atol=1e-6)
    numpy.testing.assert_array_equal(doc[4].vector, doc[4]._.elmo)
    assert doc[4].has_vector


def test_unprocessed_docs_have_no_elmo(nlp):
    doc = nlp.make_doc(TEXT)
    assert doc._.elmo is None and doc[0]._.elmo is None and doc[:2]._.elmo is None


@pytest.mark.parametrize(
    "mix,weights,gamma",
    [("top", [0, 0, 1], 1.0), (1, [0, 1, 0], 1.0), (-3, [1, 0, 0], 1.0), ({"weights": [0.2, 0.3, 0.5], "gamma": 2.0}, [0.2, 0.3, 0.5], 2.0)],
)
def test_mix_settings(tiny_model_dir, mix, weights, gamma):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "mix": mix})
    doc = nlp(TEXT)
    expected = gamma * numpy.tensordot(numpy.asarray(weights, dtype=numpy.float32), doc._.elmo.layers, axes=1)
    numpy.testing.assert_allclose(doc._.elmo.mixed, expected, atol=1e-6)


@pytest.mark.parametrize(
    "config,message",
    [
        ({"mix": "bottom"}, "elmo -> mix.*'bottom' is not typing.Literal\\['average', 'top'\\]"),
        ({"mix": "3"}, "mix must be 'average', 'top', a layer index"),
        ({"precision": "fp64"}, "elmo -> precision.*'fp64' is not typing.Literal\\['fp32', 'bf16', 'int8'\\]"),
        ({"layer_cache": "sometimes"}, "elmo -> layer_cache.*'sometimes'"),
        ({"mix": {"weights": [1, 2], "beta": 1}}, "needs 'weights'"),
        ({"window_overlap": 128}, "window_overlap"),
        ({"token_cache_size": -1}, "token_cache_size"),
        ({"num_threads": -1}, "num_threads must be 0 \\(leave torch's setting\\) or a count up to 1024, got -1"),
        ({"num_threads": 10**9}, "num_threads must be 0 \\(leave torch's setting\\) or a count up to 1024, got 1000000000"),
        ({"num_threads": "2"}, "num_threads must be an integer, got '2'"),
        ({"batch_tokens": "4096"}, "batch_tokens must be an integer, got '4096'"),
        ({"device": "cuda:0"} if not torch.cuda.is_available() else {"device": "meta"}, "no CUDA device|must be one of"),
        ({"mix": {"weights": [[1, 2]]}}, "finite numbers"),
        ({"mix": {"weights": 5}}, "mix weights must be a list of finite numbers, one per layer, got 5"),
        ({"mix": {"weights": ["a", "b", "c"]}}, "mix weights must be 3 finite numbers"),
        ({"mix": {"weights": [1, 0, 0], "gamma": "big"}}, "gamma must be a finite number, got 'big'"),
        ({"mix": {"weights": [1, 0, 0], "gamma": None}}, "gamma must be a finite number, got None"),
        ({"batch_tokens": 0}, "batch_tokens"),
        ({"window_size": 10_000}, "window_size"),
        ({"mix": True}, "boolean|mix"),
        ({"device": "toaster"}, "device"),
    ],
)
def test_bad_settings_are_clear_errors_when_the_pipe_is_added(tiny_model_dir, config, message):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), **config})


def test_a_layer_index_beyond_the_model_is_an_error_at_load(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "mix": 5})
    with pytest.raises(ValueError, match="out of range for a model with 3 layers"):
        nlp(TEXT)


def test_missing_weights_are_clear_errors(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    with pytest.raises(ValueError, match="no 'weights'"):
        nlp(TEXT)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "missing")})
    with pytest.raises(ModelFileError, match="missing: weights not found"):
        nlp(TEXT)


def test_public_weights_need_their_options(allennlp_fixture):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(allennlp_fixture / "lm_weights.hdf5")})
    with pytest.raises(ValueError, match="set 'options'"):
        nlp(TEXT)


@pytest.mark.parametrize(
    "name, message", [("notes.txt", "neither a model directory"), ("last.pt", "neither a model directory.* \\(a training checkpoint: give model-best/")]
)
def test_weights_that_are_no_model_at_all_are_named(tmp_path, name, message):
    (tmp_path / name).write_text("not a model")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / name)})
    with pytest.raises(ModelFileError, match=f"{name}: {message}"):
        nlp(TEXT)


@pytest.mark.parametrize("name", ["weights.npz", "config.json"])
def test_a_file_of_a_model_directory_as_weights_points_to_the_directory(tiny_model_dir, name):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir / name)})
    with pytest.raises(ValueError, match=f"is a file of the spacy-elmo model directory {tiny_model_dir}: give the directory itself"):
        nlp(TEXT)


def test_public_weights_load_in_the_component(allennlp_fixture):
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo",
        config={"weights": str(allennlp_fixture / "lm_weights.hdf5"), "options": str(allennlp_fixture / "options.json")},
    )
    doc = nlp(TEXT)
    assert doc._.elmo.layers.shape == (3, len(doc), 32)


def test_whitespace_tokens_are_zero_and_do_not_change_neighbours(nlp):
    spaced = nlp("a  b\n\nc")
    plain = nlp("a b c")
    assert [t.is_space for t in spaced] == [False, True, False, True, False]
    assert not spaced._.elmo.layers[:, [1, 3]].any()
    numpy.testing.assert_allclose(spaced._.elmo.layers[:, [0, 2, 4]], plain._.elmo.layers, atol=1e-6)
    numpy.testing.assert_allclose(spaced[:]._.elmo, plain[:]._.elmo, atol=1e-6)


def test_empty_and_space_only_docs(nlp):
    empty = nlp("")
    assert empty._.elmo.layers.shape == (3, 0, 12) and empty._.elmo.mixed.shape == (0, 12)
    spaces = nlp("   \n  ")
    assert len(spaces) >= 1 and not spaces._.elmo.layers.any()
    assert spaces.similarity(nlp("hello")) == 0.0


def test_sentences_are_embedded_separately(nlp):
    nlp.add_pipe("sentencizer", first=True)
    doc = nlp("The bank was closed. We sat by the river.")
    sents = list(doc.sents)
    assert len(sents) == 2
    component = nlp.get_pipe("elmo")
    for sent in sents:
        expected = reference_layers(component, [t.text for t in sent])
        numpy.testing.assert_allclose(doc._.elmo.layers[:, sent.start : sent.end], expected, atol=1e-5)


def test_docs_without_sentences_are_cut_into_windows(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "window_size": 4, "window_overlap": 0})
    doc = nlp("one two three four five six seven eight nine ten")
    component = nlp.get_pipe("elmo")
    for start in (0, 4, 8):
        words = [t.text for t in doc[start : start + 4]]
        numpy.testing.assert_allclose(doc._.elmo.layers[:, start : start + len(words)], reference_layers(component, words), atol=1e-5)


def test_overlapping_windows_keep_each_token_from_its_more_central_window(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "window_size": 6, "window_overlap": 2})
    doc = nlp("one two three four five six seven eight nine ten eleven")
    component = nlp.get_pipe("elmo")
    words = [t.text for t in doc]
    # windows [0, 6) [4, 10) [5, 11); cuts in the middle of each overlap: at 5 and at 7
    first, second, last = (reference_layers(component, words[a:b]) for a, b in ((0, 6), (4, 10), (5, 11)))
    numpy.testing.assert_allclose(doc._.elmo.layers[:, 0:5], first[:, 0:5], atol=1e-5)
    numpy.testing.assert_allclose(doc._.elmo.layers[:, 5:7], second[:, 1:3], atol=1e-5)
    numpy.testing.assert_allclose(doc._.elmo.layers[:, 7:11], last[:, 2:6], atol=1e-5)


def test_window_cuts_cover_every_token_once():
    for n in range(0, 40):
        for size, overlap in ((4, 0), (4, 1), (5, 2), (8, 7), (40, 10)):
            pieces = windows(n, size, overlap)
            kept = [i for start, end, ks, ke in pieces for i in range(start + ks, start + ke)]
            assert kept == list(range(n)), (n, size, overlap)
            assert all(end - start <= size for start, end, _, _ in pieces)
            assert all(0 <= ks <= ke <= end - start for start, end, ks, ke in pieces)


def test_set_tensor_fills_an_empty_tensor_only(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "set_tensor": True})
    doc = nlp(TEXT)
    numpy.testing.assert_array_equal(doc.tensor, doc._.elmo.mixed)
    other = nlp.make_doc(TEXT)
    other.tensor = numpy.ones((len(other), 5), dtype=numpy.float32)
    nlp.get_pipe("elmo")(other)
    numpy.testing.assert_array_equal(other.tensor, 1.0)
    default = spacy.blank("en")
    default.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    assert default(TEXT).tensor.size == 0


def test_keep_layers_off_stores_only_the_mix(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "keep_layers": False, "mix": "top"})
    doc = nlp(TEXT)
    assert doc._.elmo.layers is None and doc._.elmo.mixed.shape == (len(doc), 12)


def test_segments_and_token_budget_batches():
    nlp = spacy.blank("en")
    doc = nlp("a b c d e f g")
    segments = doc_segments(doc, 7, use_sentences=True, window_size=3, window_overlap=0)
    assert segments == [Segment(7, [0, 1, 2], 0, 3), Segment(7, [3, 4, 5], 0, 3), Segment(7, [6], 0, 1)]
    many = [Segment(0, list(range(n)), 0, n) for n in (5, 1, 3, 5, 2, 4)]
    batches = list(token_budget_batches(many, batch_tokens=10, length=lambda s: len(s.token_indices)))
    assert sorted(len(s.token_indices) for b in batches for s in b) == [1, 2, 3, 4, 5, 5]
    for batch in batches:
        lengths = [len(s.token_indices) for s in batch]
        assert lengths == sorted(lengths, reverse=True)
        assert len(batch) * lengths[0] <= 10


def test_num_threads_setting_is_applied(tiny_model_dir):
    before = torch.get_num_threads()
    try:
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "num_threads": 1})
        nlp(TEXT)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_retokenizing_after_elmo_is_a_clear_error(nlp):
    doc = nlp("New York is a big city .")
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    with pytest.raises(ValueError, match="retokenized after the elmo component"):
        _ = doc[2]._.elmo


def test_a_retokenization_that_keeps_the_token_count_is_caught_too(nlp):
    doc = nlp("New York is bigger")
    is_row = doc._.elmo.mixed[2].copy()
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[2], ["big", "ger"], heads=[(doc[2], 1), doc[1]])
    assert [t.text for t in doc] == ["New York", "is", "big", "ger"]
    with pytest.raises(ValueError, match="its tokens are not those doc._.elmo was computed for: the doc was retokenized"):
        _ = doc._.elmo
    with pytest.raises(ValueError, match="token 1 \\('is'\\) is not the one doc._.elmo row 1 was computed for"):
        _ = doc[1]._.elmo
    with pytest.raises(ValueError, match="retokenized after the elmo component"):
        _ = doc[1:3]._.elmo
    del doc.user_data[("._.", "elmo_data", None, None)]["offsets"]  # vectors stored before offsets were kept
    assert not numpy.array_equal(doc[1]._.elmo, is_row)  # unchecked: only the row count is known then


def test_a_retokenizer_before_elmo_is_fine(tiny_model_dir):
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "GPE", "pattern": "New York"}])
    nlp.add_pipe("merge_entities")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    doc = nlp("New York is a big city .")
    assert doc[0].text == "New York"
    assert doc._.elmo.layers.shape[1] == len(doc) == 6


def test_the_error_handler_is_used(nlp):
    component = nlp.get_pipe("elmo")
    seen = []
    component.set_error_handler(lambda name, proc, docs, err: seen.append((name, len(docs), str(err))))
    original = component.annotate

    def failing(docs):
        raise RuntimeError("boom")

    component.annotate = failing
    try:
        assert list(nlp.pipe(["a b", "c"])) == []
    finally:
        component.annotate = original
    assert seen == [("elmo", 2, "boom")]


def test_factory_declares_what_it_assigns(nlp):
    assert "doc._.elmo_data" in nlp.get_pipe_meta("elmo").assigns


def test_the_factory_defaults_settings_and_readme_table_agree():
    """ElmoSettings is the one definition of the defaults: the factory's config is derived
    from it, its signature must list the same settings, and the README table documents each."""
    import dataclasses
    import inspect
    import json
    import re

    from elmo_testing import REPO
    from spacy_elmo.pipeline.component import DEFAULT_CONFIG, make_elmo
    from spacy_elmo.pipeline.config import ElmoSettings

    fields = {field.name: field.default for field in dataclasses.fields(ElmoSettings)}
    assert DEFAULT_CONFIG == {"weights": "", "options": None, **fields}
    assert list(inspect.signature(make_elmo).parameters)[2:] == list(DEFAULT_CONFIG)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Component settings", 1)[1].split("\n\n", 2)[1]
    documented = {m[1]: json.loads(m[2]) for m in re.finditer(r"^\| `(\w+)` \| `(.*?)` \|", section, flags=re.M)}
    assert documented == DEFAULT_CONFIG


def test_an_explicit_mix_refuses_a_gamma_or_weight_that_is_not_finite():
    """NaN and infinity do not pass through spaCy's JSON config, but do through the Python API."""
    assert LayerMix.from_setting({"weights": [1, 0, 0], "gamma": 2}, 3).gamma == 2.0
    with pytest.raises(ValueError, match="gamma must be a finite number, got nan"):
        LayerMix.from_setting({"weights": [1, 0, 0], "gamma": float("nan")}, 3)
    with pytest.raises(ValueError, match="mix weights must be 3 finite numbers, got \\[1, inf, 0\\]"):
        LayerMix.from_setting({"weights": [1, float("inf"), 0]}, 3)
