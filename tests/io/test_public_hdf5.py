"""Reading and writing the public ELMo hdf5 + options format, its variants and its errors."""

import json
import shutil

import h5py
import numpy
import pytest
import torch

from elmo_testing import TINY_CONFIG, fill_the_disk_at_dataset, random_bilm, random_word_bilm
from spacy_elmo.io import ModelFileError, load_public_model, public_hdf5, read_options, save_public_model, save_public_weights
from spacy_elmo.io.staging import WriteError
from spacy_elmo.nn import BiLMConfig, batch_to_char_ids

SENTENCES = [["The", "bank", "of", "the", "river", "."], ["Cash", "in", "the", "bank", "!"]]


def embed(bilm, sentences=SENTENCES) -> numpy.ndarray:
    with torch.no_grad():
        return bilm(torch.from_numpy(batch_to_char_ids(sentences)), [len(s) for s in sentences]).layers.numpy()


@pytest.mark.parametrize(
    "config",
    [
        TINY_CONFIG,
        # CNN_proj absent: the char-CNN width equals the projection.
        BiLMConfig(filters=((1, 2), (2, 4)), char_embedding_dim=4, n_highway=1, lstm_dim=12, projection_dim=6, n_layers=2),
        # W_P_0 absent: the cell size equals the projection; no skip connections, tanh.
        BiLMConfig(
            filters=((1, 4), (2, 8)),
            char_embedding_dim=4,
            n_highway=0,
            lstm_dim=6,
            projection_dim=6,
            n_layers=3,
            use_skip_connections=False,
            activation="tanh",
            cell_clip=None,
            proj_clip=None,
        ),
    ],
    ids=["projected", "no-cnn-proj", "no-lstm-proj"],
)
def test_export_then_import_keeps_weights_and_outputs(tmp_path, config):
    bilm = random_bilm(config)
    save_public_model(bilm, tmp_path / "options.json", tmp_path / "weights.hdf5")
    with h5py.File(tmp_path / "weights.hdf5", "r") as handle:
        assert ("CNN_proj" in handle) == (config.n_filters != config.projection_dim)
        assert ("RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0" in handle) == (config.lstm_dim != config.projection_dim)
        assert handle["char_embed"].shape == (261, config.char_embedding_dim)
    loaded = load_public_model(tmp_path / "options.json", tmp_path / "weights.hdf5")
    for (name, a), (_, b) in zip(bilm.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    numpy.testing.assert_array_equal(embed(bilm), embed(loaded))


@pytest.mark.parametrize("folder", ["options.json", "weights.hdf5"])
def test_a_folder_in_place_of_either_file_is_refused_before_the_other_is_written(tmp_path, folder):
    (tmp_path / folder).mkdir()
    with pytest.raises(ValueError, match=f"{folder} is a folder: give the public pair's two files other places"):
        save_public_model(random_bilm(), tmp_path / "options.json", tmp_path / "weights.hdf5")
    assert [path.name for path in tmp_path.iterdir()] == [folder]


def test_a_word_model_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="public ELMo format holds char-CNN biLMs only; this one has token_encoder 'words'"):
        save_public_model(random_word_bilm(), tmp_path / "out" / "options.json", tmp_path / "out" / "weights.hdf5")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="char-CNN biLMs only"):
        save_public_weights(random_word_bilm(), tmp_path / "weights.hdf5")
    assert not (tmp_path / "weights.hdf5").exists()


def test_tensorflow_conventions_are_converted(allennlp_fixture):
    """Gate order and highway layout follow bilm-tf, checked on raw datasets; the constant
    forget bias stays outside the stored bias, as in TensorFlow."""
    bilm = load_public_model(allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5")
    with h5py.File(allennlp_fixture / "lm_weights.hdf5", "r") as handle:
        cell = handle["RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell"]
        w0, b = cell["W_0"][...], cell["B"][...]
        w_transform = handle["CNN_high_1/W_transform"][...]
        char_embed = handle["char_embed"][...]
    lstm = bilm.backward_stack.layers[0]
    h = 64
    i_tf, j_tf, f_tf, o_tf = (slice(k * h, (k + 1) * h) for k in range(4))
    i_pt, f_pt, g_pt, o_pt = (slice(k * h, (k + 1) * h) for k in range(4))
    bias = lstm.bias.detach().numpy()
    numpy.testing.assert_array_equal(bias[f_pt], b[f_tf])
    assert lstm.forget_bias == 1.0
    numpy.testing.assert_array_equal(bias[g_pt], b[j_tf])
    numpy.testing.assert_array_equal(lstm.input_weight.detach().numpy()[o_pt], w0[:16, o_tf].T)
    numpy.testing.assert_array_equal(lstm.recurrent_weight.detach().numpy()[i_pt], w0[16:, i_tf].T)
    numpy.testing.assert_array_equal(bilm.token_encoder.highways[1].transform.weight.detach().numpy(), w_transform.T)
    embedding = bilm.token_encoder.char_embedding.weight.detach().numpy()
    numpy.testing.assert_array_equal(embedding[0], 0.0)
    numpy.testing.assert_array_equal(embedding[1:], char_embed)


def test_training_options_with_261_characters_load(tmp_path, allennlp_fixture):
    options = json.loads((allennlp_fixture / "options.json").read_text())
    options["char_cnn"]["n_characters"] = 261
    (tmp_path / "options.json").write_text(json.dumps(options))
    a = load_public_model(allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5")
    b = load_public_model(tmp_path / "options.json", allennlp_fixture / "lm_weights.hdf5")
    numpy.testing.assert_array_equal(embed(a), embed(b))


def test_options_of_the_wrong_type_are_named_not_converted(tmp_path, allennlp_fixture):
    options = json.loads((allennlp_fixture / "options.json").read_text())
    options["lstm"]["use_skip_connections"] = "false"
    options["lstm"]["n_layers"] = 2.5
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(ModelFileError, match="options.json.*n_layers must be an integer, got 2.5; use_skip_connections must be true or false"):
        load_public_model(tmp_path / "options.json", allennlp_fixture / "lm_weights.hdf5")


def test_options_with_another_character_count_name_the_key(tmp_path, allennlp_fixture):
    options = json.loads((allennlp_fixture / "options.json").read_text())
    options["char_cnn"]["n_characters"] = 300
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(ModelFileError, match="options.json.*char_cnn.n_characters must be 261 or 262, got 300"):
        load_public_model(tmp_path / "options.json", allennlp_fixture / "lm_weights.hdf5")


def test_missing_weight_file_names_it(tmp_path, allennlp_fixture):
    missing = tmp_path / "nope.hdf5"
    with pytest.raises(ModelFileError, match="nope.hdf5: weight file not found"):
        load_public_model(allennlp_fixture / "options.json", missing)


def test_missing_options_file_names_it(tmp_path, allennlp_fixture):
    with pytest.raises(ModelFileError, match="options.json: options file not found"):
        load_public_model(tmp_path / "options.json", allennlp_fixture / "lm_weights.hdf5")


def test_truncated_hdf5_is_a_clear_error(tmp_path, allennlp_fixture):
    data = (allennlp_fixture / "lm_weights.hdf5").read_bytes()
    truncated = tmp_path / "truncated.hdf5"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match=r"truncated\.hdf5: .*(truncated|corrupt)"):
        load_public_model(allennlp_fixture / "options.json", truncated)


def test_garbage_options_file_is_a_clear_error(tmp_path, allennlp_fixture):
    (tmp_path / "options.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="options.json: not a valid JSON"):
        read_options(tmp_path / "options.json")
    (tmp_path / "options.json").write_text(json.dumps({"lstm": {}}))
    with pytest.raises(ModelFileError, match="lacks the key 'char_cnn'"):
        read_options(tmp_path / "options.json")
    for options, message in [
        ({"lstm": {}, "char_cnn": [1]}, "'char_cnn' must be a JSON object, got \\[1\\]"),
        ({"lstm": 3, "char_cnn": {}}, "'lstm' must be a JSON object, got 3"),
        ({"lstm": {}, "char_cnn": {"filters": [[1, 4]], "embedding": 16}}, "'char_cnn.embedding' must be a JSON object, got 16"),
        ([1], "the options must be a JSON object"),
    ]:
        (tmp_path / "options.json").write_text(json.dumps(options))
        with pytest.raises(ModelFileError, match=f"options.json: invalid options \\({message}"):
            read_options(tmp_path / "options.json")


def test_options_of_absurd_sizes_are_refused_before_anything_is_allocated(tmp_path, allennlp_fixture, monkeypatch):
    options = json.loads((allennlp_fixture / "options.json").read_text())
    options["lstm"]["dim"] = 2**30  # (4 * 2**30, ...) matrices: terabytes
    (tmp_path / "options.json").write_text(json.dumps(options))
    monkeypatch.setattr(public_hdf5, "BiLM", lambda *args: pytest.fail("a biLM was built before the shapes were checked"))
    with pytest.raises(ModelFileError, match=r"lm_weights.hdf5: dataset '.*' has shape .*, but the options in .*options.json call for \(32, 4294967296\)"):
        load_public_model(tmp_path / "options.json", allennlp_fixture / "lm_weights.hdf5")


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda o: o["lstm"].update(projection_dim=32), "does not match|call for"),
        (lambda o: o["lstm"].update(n_layers=1), "Cell1"),
        (lambda o: o["lstm"].update(n_layers=3), "Cell2.*missing"),
        (lambda o: o["char_cnn"].update(n_highway=1), "CNN_high_1"),
        (lambda o: o["char_cnn"]["filters"].pop(), "W_cnn_4"),
        (lambda o: o["char_cnn"]["embedding"].update(dim=8), "char_embed"),
    ],
    ids=["projection", "fewer-layers", "more-layers", "highways", "filters", "char-dim"],
)
def test_options_that_do_not_match_the_weights_are_named(tmp_path, allennlp_fixture, change, message):
    options = json.loads((allennlp_fixture / "options.json").read_text())
    change(options)
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(ModelFileError) as info:
        load_public_model(tmp_path / "options.json", allennlp_fixture / "lm_weights.hdf5")
    text = str(info.value)
    assert text.startswith(str(allennlp_fixture / "lm_weights.hdf5"))
    assert "options.json" in text
    assert __import__("re").search(message, text), text


@pytest.mark.parametrize(
    "extra,named",
    [
        ("RNN_1/RNN/MultiRNNCell/Cell2/LSTMCell/B", "RNN_1/RNN/MultiRNNCell/Cell2"),
        ("RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0", "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"),
    ],
    ids=["backward-layer", "backward-projection"],
)
def test_weights_the_options_do_not_describe_are_refused_in_either_direction(tmp_path, extra, named):
    """A layer (or a projection) that only the backward LSTM has is named, not dropped."""
    config = BiLMConfig(filters=((1, 4), (2, 8)), char_embedding_dim=4, n_highway=1, lstm_dim=6, projection_dim=6, n_layers=2)
    save_public_model(random_bilm(config), tmp_path / "options.json", tmp_path / "weights.hdf5")
    with h5py.File(tmp_path / "weights.hdf5", "r+") as handle:
        handle.create_dataset(extra, data=numpy.zeros(4, dtype=numpy.float32))
    with pytest.raises(ModelFileError, match=f"weights.hdf5: holds '{named}', which the options in .*options.json do not describe"):
        load_public_model(tmp_path / "options.json", tmp_path / "weights.hdf5")


def test_nan_weights_are_rejected(tmp_path, allennlp_fixture):
    weights = tmp_path / "weights.hdf5"
    shutil.copy(allennlp_fixture / "lm_weights.hdf5", weights)
    weights.chmod(0o644)
    with h5py.File(weights, "r+") as handle:
        handle["CNN_proj/b_proj"][0] = numpy.nan
    with pytest.raises(ModelFileError, match="CNN_proj/b_proj.*NaN"):
        load_public_model(allennlp_fixture / "options.json", weights)


@pytest.mark.parametrize("damage", ["group", "integers"])
def test_datasets_of_the_wrong_kind_are_rejected(tmp_path, allennlp_fixture, damage):
    weights = tmp_path / "weights.hdf5"
    shutil.copy(allennlp_fixture / "lm_weights.hdf5", weights)
    weights.chmod(0o644)
    with h5py.File(weights, "r+") as handle:
        del handle["CNN_proj/b_proj"]
        if damage == "group":
            handle.create_group("CNN_proj/b_proj")
        else:
            handle.create_dataset("CNN_proj/b_proj", data=numpy.ones(16, dtype=numpy.int8))
    with pytest.raises(ModelFileError, match=r"weights.hdf5: 'CNN_proj/b_proj' is not a floating-point dataset"):
        load_public_model(allennlp_fixture / "options.json", weights)


def test_an_export_that_fails_part_way_keeps_both_earlier_files(tmp_path, monkeypatch):
    save_public_model(random_bilm(seed=1), tmp_path / "options.json", tmp_path / "weights.hdf5")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    fill_the_disk_at_dataset(monkeypatch, 3)
    changed = BiLMConfig.from_dict({**TINY_CONFIG.to_dict(), "filters": [[1, 4], [2, 4]]})  # other options too
    with pytest.raises(WriteError, match="weights.hdf5: could not be written \\(No space left on device\\)"):
        save_public_model(random_bilm(changed, seed=2), tmp_path / "options.json", tmp_path / "weights.hdf5")
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no staging file left either
