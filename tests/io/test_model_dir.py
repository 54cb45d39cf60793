"""The project's own model directory and byte format: exact round trips, no pickles."""

import io
import json
import pathlib
import pickle

import numpy
import pytest
import torch

from elmo_testing import WORDS, no_space, random_bilm, random_word_bilm
from spacy_elmo.io import ModelFileError, load_model, model_from_bytes, model_to_bytes, save_model
from spacy_elmo.io.model_dir import read_training_record
from spacy_elmo.io.staging import WriteError
from spacy_elmo.nn.special_tokens import SPECIAL_TOKENS


def assert_same_weights(a, b):
    assert a.config == b.config
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


def test_directory_round_trip_is_exact(tmp_path):
    bilm = random_bilm()
    save_model(bilm, tmp_path / "model")
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["config.json", "weights.npz"]
    assert_same_weights(bilm, load_model(tmp_path / "model"))


def test_bytes_round_trip_is_exact():
    bilm = random_bilm(seed=3)
    assert_same_weights(bilm, model_from_bytes(model_to_bytes(bilm)))


def test_missing_directory_and_files_are_named(tmp_path):
    with pytest.raises(ModelFileError, match="nowhere: model directory not found"):
        load_model(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFileError, match="no config.json"):
        load_model(tmp_path / "empty")
    save_model(random_bilm(), tmp_path / "model")
    (tmp_path / "model" / "weights.npz").unlink()
    with pytest.raises(ModelFileError, match="weights.npz: weight file not found"):
        load_model(tmp_path / "model")


def test_truncated_weights_are_a_clear_error(tmp_path):
    save_model(random_bilm(), tmp_path / "model")
    weights = tmp_path / "model" / "weights.npz"
    weights.write_bytes(weights.read_bytes()[:500])
    with pytest.raises(ModelFileError, match="weights.npz: not a readable weight archive"):
        load_model(tmp_path / "model")


def test_weights_of_another_shape_are_rejected(tmp_path):
    save_model(random_bilm(), tmp_path / "model")
    header = json.loads((tmp_path / "model" / "config.json").read_text())
    header["bilm"]["lstm_dim"] = 16
    (tmp_path / "model" / "config.json").write_text(json.dumps(header))
    with pytest.raises(ModelFileError, match="weights.npz: .*shape"):
        load_model(tmp_path / "model")


def test_a_config_value_of_the_wrong_type_or_nan_weights_are_named(tmp_path):
    save_model(random_bilm(), tmp_path / "model")
    config_path = tmp_path / "model" / "config.json"
    header = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**header, "bilm": {**header["bilm"], "use_skip_connections": "false"}}))
    with pytest.raises(ModelFileError, match="config.json: .*use_skip_connections must be true or false, got 'false'"):
        load_model(tmp_path / "model")
    config_path.write_text(json.dumps(header))
    arrays = dict(numpy.load(tmp_path / "model" / "weights.npz"))
    name = sorted(arrays)[0]
    arrays[name] = arrays[name].copy()
    arrays[name].flat[0] = numpy.nan
    numpy.savez(tmp_path / "model" / "weights.npz", **arrays)
    with pytest.raises(ModelFileError, match=f"weights.npz: {name} holds NaN or infinite values"):
        load_model(tmp_path / "model")


def test_float64_weights_beyond_float32s_range_are_refused_and_others_load_as_float32(tmp_path):
    bilm = random_bilm()
    save_model(bilm, tmp_path / "model")
    arrays = dict(numpy.load(tmp_path / "model" / "weights.npz"))
    name = sorted(arrays)[0]
    numpy.savez(tmp_path / "model" / "weights.npz", **{**arrays, name: arrays[name].astype(numpy.float64)})
    loaded = load_model(tmp_path / "model")  # float64 within range: the same float32 values
    assert all(torch.equal(value, bilm.state_dict()[key]) for key, value in loaded.state_dict().items())
    numpy.savez(tmp_path / "model" / "weights.npz", **{**arrays, name: arrays[name].astype(numpy.float64) * 1e300})
    with pytest.raises(ModelFileError, match=rf"weights.npz: {name} holds NaN or infinite values \(or values beyond float32's range\)"):
        load_model(tmp_path / "model")


def test_pickled_objects_are_never_loaded(tmp_path):
    """An archive that smuggles an object array is refused, not unpickled."""
    save_model(random_bilm(), tmp_path / "model")
    with numpy.load(tmp_path / "model" / "weights.npz") as archive:
        arrays = dict(archive)
    name = next(iter(arrays))
    arrays[name] = numpy.array([object()], dtype=object)
    buffer = io.BytesIO()
    numpy.savez(buffer, **arrays)
    (tmp_path / "model" / "weights.npz").write_bytes(buffer.getvalue())
    with pytest.raises(ModelFileError, match="weights.npz"):
        load_model(tmp_path / "model")
    with pytest.raises(ModelFileError, match="not a serialized spacy-elmo model"):
        model_from_bytes(pickle.dumps({"header": {}, "weights": b""}))


def test_unknown_format_version_is_rejected(tmp_path):
    save_model(random_bilm(), tmp_path / "model")
    header = json.loads((tmp_path / "model" / "config.json").read_text())
    header["version"] = 99
    (tmp_path / "model" / "config.json").write_text(json.dumps(header))
    with pytest.raises(ModelFileError, match="config.json: format version 99"):
        load_model(tmp_path / "model")


def test_a_word_model_round_trips_with_its_vocabulary(tmp_path):
    bilm = random_word_bilm(words=WORDS + ("naïve", "日本"))
    save_model(bilm, tmp_path / "model")
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["config.json", "weights.npz", "words.json"]
    for loaded in (load_model(tmp_path / "model"), model_from_bytes(model_to_bytes(bilm))):
        assert_same_weights(bilm, loaded)
        assert loaded.words == bilm.words and loaded.config.token_encoder == "words"


def test_a_word_model_without_a_fitting_vocabulary_is_a_clear_error(tmp_path):
    save_model(random_word_bilm(), tmp_path / "model")
    words = tmp_path / "model" / "words.json"
    words.write_text(json.dumps(list(WORDS) + ["extra"]))
    with pytest.raises(ModelFileError, match="words.json: lists 12 words, the weights have 11 rows"):
        load_model(tmp_path / "model")
    words.write_text(json.dumps(["the", "<S>", "</S>", "<UNK>"]))
    with pytest.raises(ModelFileError, match="words.json: invalid word vocabulary .*must start with"):
        load_model(tmp_path / "model")
    words.write_text('["<S>", ')
    with pytest.raises(ModelFileError, match="words.json: not valid JSON"):
        load_model(tmp_path / "model")
    words.unlink()
    with pytest.raises(ModelFileError, match="words.json: a word-level biLM needs its vocabulary file"):
        load_model(tmp_path / "model")


def test_a_char_model_saved_over_a_word_model_leaves_no_vocabulary_behind(tmp_path):
    save_model(random_word_bilm(), tmp_path / "model")
    save_model(random_bilm(), tmp_path / "model")
    assert not (tmp_path / "model" / "words.json").exists()
    assert load_model(tmp_path / "model").words is None


def test_bytes_whose_vocabulary_is_not_a_list_are_a_clear_error():
    import srsly

    message = srsly.msgpack_loads(model_to_bytes(random_word_bilm()))
    message["words"] = 5
    with pytest.raises(ModelFileError, match="not a list of words"):
        model_from_bytes(srsly.msgpack_dumps(message))


@pytest.mark.parametrize("weights", ["weights.npz", 7, None, [1, 2]])
def test_bytes_whose_weights_are_not_bytes_are_a_clear_error(weights):
    import srsly

    message = srsly.msgpack_loads(model_to_bytes(random_bilm()))
    message["weights"] = weights
    with pytest.raises(ModelFileError, match="not a serialized spacy-elmo model \\(its weights are .*, not bytes\\)"):
        model_from_bytes(srsly.msgpack_dumps(message))


def fill_the_disk_at(monkeypatch, name):
    """From now on in the test, writing a file called `name` fails as on a full disk."""
    real_write_bytes = pathlib.Path.write_bytes

    def write_bytes(path, data):
        if path.name == name:
            raise no_space()
        return real_write_bytes(path, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)


@pytest.mark.parametrize("make_bilm", [random_bilm, random_word_bilm])
def test_a_model_save_that_fails_part_way_keeps_the_saved_model_and_other_files(tmp_path, monkeypatch, make_bilm):
    path = tmp_path / "model"
    save_model(make_bilm(seed=1), path)
    (path / "softmax.npz").write_bytes(b"the output layer of a training")
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    changed = make_bilm(seed=2)
    if changed.words is not None:  # the same words in another order: only a whole save keeps them matched to their rows
        changed = random_word_bilm(words=[*SPECIAL_TOKENS, *reversed(changed.words[len(SPECIAL_TOKENS) :])], seed=2)
    fill_the_disk_at(monkeypatch, "weights.npz")
    with pytest.raises(WriteError) as caught:
        save_model(changed, path)
    monkeypatch.undo()
    assert str(caught.value) == f"{path}: could not be written (No space left on device)"
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert_same_weights(make_bilm(seed=1), load_model(path))
    save_model(changed, path)  # and a save that succeeds keeps the other files
    assert (path / "softmax.npz").read_bytes() == b"the output layer of a training"
    assert_same_weights(changed, load_model(path))


def test_a_model_is_saved_only_over_a_model_or_an_empty_folder(tmp_path, monkeypatch):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(ValueError, match="notes: already exists and is neither empty nor a spacy-elmo model directory"):
        save_model(random_bilm(), tmp_path / "notes")
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["todo.txt"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"model_type": "bert"}')  # another program's folder
    with pytest.raises(ValueError, match="other: already exists and is neither empty nor a spacy-elmo model directory"):
        save_model(random_bilm(), tmp_path / "other")
    assert (tmp_path / "other" / "config.json").read_text() == '{"model_type": "bert"}'
    (tmp_path / "empty").mkdir()
    save_model(random_bilm(), tmp_path / "empty")
    assert_same_weights(random_bilm(), load_model(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path / "empty")
    with pytest.raises(ValueError, match="empty: holds the working directory"):
        save_model(random_bilm(seed=3), tmp_path / "empty")
    assert_same_weights(random_bilm(), load_model(tmp_path / "empty"))


@pytest.mark.parametrize("text, expected", [(None, None), ('{"step": 3, "tokens": 120}', {"step": 3, "tokens": 120}), ("{cut", None), ("[3, 120]", None)])
def test_the_training_record_is_its_json_object_or_none(tmp_path, text, expected):
    if text is not None:
        (tmp_path / "training.json").write_text(text, encoding="utf-8")
    assert read_training_record(tmp_path) == expected


def test_a_config_of_absurd_sizes_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    from spacy_elmo.io import model_dir

    save_model(random_bilm(), tmp_path / "model")
    config_path = tmp_path / "model" / "config.json"
    header = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**header, "bilm": {**header["bilm"], "lstm_dim": 2**30}}))
    monkeypatch.setattr(model_dir, "BiLM", lambda *args: pytest.fail("a biLM was built before the shapes were checked"))
    with pytest.raises(ModelFileError, match=r"weights.npz: .* has shape .*, the configuration calls for \(4294967296, .*\)"):
        load_model(tmp_path / "model")
    config_path.write_text(json.dumps({**header, "bilm": [1, 2]}))
    with pytest.raises(ModelFileError, match="config.json: invalid biLM configuration .*must be an object of settings, got list"):
        load_model(tmp_path / "model")
