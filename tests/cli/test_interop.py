"""convert / export / dump / warm: interop with the public format and `allennlp elmo`."""

import errno
import json
import os
import pathlib
import subprocess
import sys

import h5py
import numpy
import pytest
import spacy
import torch
from typer.testing import CliRunner

from elmo_testing import fill_the_disk_at_dataset, plain, random_bilm, random_word_bilm
from spacy_elmo.cli import app
from spacy_elmo.io import load_public_model, save_model

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def test_convert_then_load_reproduces_the_golden_outputs(tmp_path, allennlp_fixture):
    invoke("convert", allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5", tmp_path / "pipe")
    nlp = spacy.load(tmp_path / "pipe")
    assert nlp.pipe_names == ["sentencizer", "elmo"]
    assert nlp.meta["name"] == "elmo"
    groups = json.loads((allennlp_fixture / "sentences.json").read_text())
    with h5py.File(allennlp_fixture / "lm_embeddings_0.hdf5", "r") as handle:
        recorded = numpy.concatenate(handle["0"][...], axis=1)  # batch 0: started from zero state
    tokens = groups[0][0].split()
    doc = nlp.get_pipe("elmo")(spacy.tokens.Doc(nlp.vocab, words=tokens))
    numpy.testing.assert_allclose(doc._.elmo.layers[2], recorded[: len(tokens)], atol=1.5e-6)


def test_converted_pipeline_packages(tmp_path, allennlp_fixture):
    invoke("convert", allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5", tmp_path / "pipe")
    (tmp_path / "packages").mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "spacy", "package", str(tmp_path / "pipe"), str(tmp_path / "packages"), "--build", "none", "--force"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    package = tmp_path / "packages" / "en_elmo-0.0.0"
    assert (package / "setup.py").is_file()
    assert (package / "en_elmo" / "en_elmo-0.0.0" / "elmo" / "weights.npz").is_file()


def test_export_then_import_gives_identical_weights(tmp_path, allennlp_fixture):
    invoke("convert", allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5", tmp_path / "pipe")
    invoke("export", tmp_path / "pipe", tmp_path / "public")
    original = load_public_model(allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5")
    again = load_public_model(tmp_path / "public" / "options.json", tmp_path / "public" / "weights.hdf5")
    for (name, a), (_, b) in zip(original.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    with h5py.File(allennlp_fixture / "lm_weights.hdf5", "r") as source, h5py.File(tmp_path / "public" / "weights.hdf5", "r") as copy:
        names = []
        source.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in names:
            numpy.testing.assert_array_equal(source[name][...], copy[name][...], err_msg=name)


@pytest.fixture
def sentences_file(tmp_path):
    lines = ["The bank of the river .", "Cash !", "I sat by the bank of the river and watched the water flow ."]
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(lines) + "\n")
    return path, lines


def reference_layers(bilm, tokens):
    with torch.no_grad():
        return bilm(bilm.input_ids([tokens]), [len(tokens)]).layers[:, 0].numpy()


@pytest.mark.parametrize("make_bilm", [random_bilm, random_word_bilm], ids=["characters", "words"])
@pytest.mark.parametrize("flag", ["--all", "--top", "--average"])
def test_dump_writes_the_allennlp_layout(tmp_path, sentences_file, flag, make_bilm):
    path, lines = sentences_file
    bilm = make_bilm()
    save_model(bilm, tmp_path / "model")
    invoke("dump", tmp_path / "model", path, tmp_path / "out.hdf5", flag, "--batch-tokens", "16")
    with h5py.File(tmp_path / "out.hdf5", "r") as out:
        assert sorted(out.keys()) == ["0", "1", "2", "sentence_to_index"]
        mapping = json.loads(out["sentence_to_index"][0])
        assert mapping == {line: str(i) for i, line in enumerate(lines)}
        for i, line in enumerate(lines):
            expected = reference_layers(bilm, line.split())
            expected = {"--all": expected, "--top": expected[-1], "--average": expected.mean(axis=0)}[flag]
            assert out[str(i)].shape == expected.shape
            assert out[str(i)].dtype == numpy.float32
            numpy.testing.assert_allclose(out[str(i)][...], expected, atol=1e-5)


def test_dump_with_sentence_keys(tmp_path, sentences_file):
    path, lines = sentences_file
    save_model(random_bilm(), tmp_path / "model")
    invoke("dump", tmp_path / "model", path, tmp_path / "out.hdf5", "--top", "--use-sentence-keys")
    with h5py.File(tmp_path / "out.hdf5", "r") as out:
        assert sorted(out.keys()) == sorted(lines)
        assert out[lines[1]].shape == (2, 12)


@pytest.mark.parametrize(
    "content,extra,message",
    [
        ("a b\n\nc\n", [], "line 2 is empty"),
        ("", [], "is empty"),
        ("and/or\n", ["--use-sentence-keys"], "HDF5 key"),
        ("same\nsame\n", ["--use-sentence-keys"], "repeats an earlier sentence"),
        ("a\x00b\n", ["--use-sentence-keys"], "HDF5 key"),
        ("a b\n", ["--batch-tokens", "0"], "batch_tokens must be positive"),
        ("a b\n", ["--threads", "-1"], "num_threads"),
        ("a b\n", ["--precision", "fp8"], "precision must be one of"),
    ],
)
def test_dump_rejects_bad_input_before_writing(tmp_path, content, extra, message):
    save_model(random_bilm(), tmp_path / "model")
    (tmp_path / "in.txt").write_text(content)
    result = runner.invoke(app, ["dump", str(tmp_path / "model"), str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--top", *extra])
    assert result.exit_code != 0
    assert message in plain(result.output)
    assert not (tmp_path / "out.hdf5").exists()


def test_dump_needs_exactly_one_layer_flag(tmp_path, sentences_file):
    path, _ = sentences_file
    save_model(random_bilm(), tmp_path / "model")
    result = runner.invoke(app, ["dump", str(tmp_path / "model"), str(path), str(tmp_path / "o.hdf5"), "--top", "--all"])
    assert result.exit_code != 0 and "exactly one of --all, --top, --average" in plain(result.output)


def test_warm_command_on_a_pipeline(tmp_path, allennlp_fixture, sentences_file):
    path, _ = sentences_file
    invoke("convert", allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5", tmp_path / "pipe")
    invoke("warm", tmp_path / "pipe", path, tmp_path / "warm-pipe", "--rows", "2")
    cold, warm = spacy.load(tmp_path / "pipe"), spacy.load(tmp_path / "warm-pipe")
    assert warm.get_pipe("elmo").bilm.config.warm_state
    a, b = cold("The bank ."), warm("The bank .")
    numpy.testing.assert_allclose(a._.elmo.layers[0], b._.elmo.layers[0], atol=1e-6)
    assert numpy.abs(a._.elmo.layers[2] - b._.elmo.layers[2]).max() > 1e-3
    result = invoke("export", tmp_path / "warm-pipe", tmp_path / "public")
    assert "warm state was not exported" in result.output


def test_dump_errors_on_a_missing_output_directory_or_model(tmp_path, sentences_file):
    path, _ = sentences_file
    save_model(random_bilm(), tmp_path / "model")
    result = runner.invoke(app, ["dump", str(tmp_path / "model"), str(path), str(tmp_path / "no" / "o.hdf5"), "--top"])
    assert result.exit_code == 2 and "output directory not found" in plain(result.output)
    result = runner.invoke(app, ["dump", str(tmp_path / "nomodel"), str(path), str(tmp_path / "o.hdf5"), "--top"])
    assert result.exit_code == 2 and "nomodel: weights not found" in plain(result.output)


def test_a_dump_that_fails_part_way_keeps_the_file_it_would_replace(tmp_path, sentences_file, monkeypatch):
    path, _ = sentences_file
    save_model(random_bilm(), tmp_path / "model")
    (tmp_path / "out.hdf5").write_bytes(b"an earlier dump")
    fill_the_disk_at_dataset(monkeypatch, 2)
    result = runner.invoke(app, ["dump", str(tmp_path / "model"), str(path), str(tmp_path / "out.hdf5"), "--top"])
    assert result.exit_code == 2 and f"{tmp_path / 'out.hdf5'}: could not be written (No space left on device)" in plain(result.output)
    assert (tmp_path / "out.hdf5").read_bytes() == b"an earlier dump"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out.hdf5", "sentences.txt"]  # no staging file left


class _FailingLines:
    """A text file whose lines after the first cannot be read (an I/O error)."""

    def __init__(self, out):
        self.out = out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.out.close()

    def __iter__(self):
        yield next(iter(self.out))
        raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_dump_whose_input_fails_part_way_names_the_input_and_keeps_the_output(tmp_path, sentences_file, monkeypatch):
    path, _ = sentences_file
    save_model(random_bilm(), tmp_path / "model")
    (tmp_path / "out.hdf5").write_bytes(b"an earlier dump")
    real_open = pathlib.Path.open
    opened = []

    def open_failing_on_the_second_read(file, *args, **kwargs):
        handle = real_open(file, *args, **kwargs)
        if file == path:
            opened.append(file)
            if len(opened) == 2:  # the first read only counts the lines
                return _FailingLines(handle)
        return handle

    monkeypatch.setattr(pathlib.Path, "open", open_failing_on_the_second_read)
    result = runner.invoke(app, ["dump", str(tmp_path / "model"), str(path), str(tmp_path / "out.hdf5"), "--top"])
    monkeypatch.undo()
    message = plain(result.output).replace(" ", "")  # the error box may break the path
    assert result.exit_code == 2 and f"{path}:couldnotberead(Input/outputerror)" in message and "couldnotbewritten" not in message
    assert (tmp_path / "out.hdf5").read_bytes() == b"an earlier dump"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out.hdf5", "sentences.txt"]


def test_dump_forget_sentences_and_many_chunks(tmp_path, monkeypatch):
    """Several read chunks, and no sentence_to_index with --forget-sentences."""
    import spacy_elmo.cli.dump as dump_module

    monkeypatch.setattr(dump_module, "LINES_PER_CHUNK", 7)
    trims = []
    monkeypatch.setattr(dump_module, "release_freed_memory", lambda: trims.append(1))
    bilm = random_bilm()
    save_model(bilm, tmp_path / "model")
    lines = [" ".join(["w%d" % (i % 5)] * (1 + i % 9)) for i in range(30)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    invoke("dump", tmp_path / "model", tmp_path / "in.txt", tmp_path / "out.hdf5", "--average", "--forget-sentences")
    assert len(trims) == 5  # after each chunk of 7 lines: the heap is handed back as it goes
    with h5py.File(tmp_path / "out.hdf5", "r") as out:
        # HDF5 1.8 groups: the old format's group index grows in memory with every dataset
        assert out.id.get_create_plist().get_version()[0] == 2  # superblock 2: the 1.8 format (the default writes 0)
        assert sorted(out.keys(), key=int) == [str(i) for i in range(30)]
        for i in (0, 6, 7, 29):
            expected = reference_layers(bilm, lines[i].split()).mean(axis=0)
            numpy.testing.assert_allclose(out[str(i)][...], expected, atol=1e-5)


def test_export_of_an_unclipped_model_names_both_clips(tmp_path):
    from spacy_elmo.nn import BiLMConfig

    config = BiLMConfig(
        filters=((1, 4), (2, 8)),
        char_embedding_dim=4,
        n_highway=0,
        lstm_dim=6,
        projection_dim=6,
        n_layers=1,
        use_skip_connections=False,
        cell_clip=None,
        proj_clip=None,
    )
    save_model(random_bilm(config), tmp_path / "model")
    result = invoke("export", tmp_path / "model", tmp_path / "public")
    options = json.loads((tmp_path / "public" / "options.json").read_text())
    assert options["lstm"]["cell_clip"] is None and options["lstm"]["proj_clip"] is None
    assert "AllenNLP's reader assumes" in result.output
    again = load_public_model(tmp_path / "public" / "options.json", tmp_path / "public" / "weights.hdf5")
    assert again.config == config


def test_a_pipeline_is_written_whole_and_only_over_a_pipeline_or_an_empty_folder(tmp_path, allennlp_fixture, sentences_file, monkeypatch):
    path, _ = sentences_file
    save_model(random_bilm(), tmp_path / "model")
    project = tmp_path / "project"  # a spaCy project: a config.cfg, and the user's data beside it
    project.mkdir()
    (project / "config.cfg").write_text("[nlp]\n")
    (project / "train.spacy").write_bytes(b"data")
    for folder in (project, tmp_path / "model"):
        result = runner.invoke(app, ["assemble", str(tmp_path / "model"), str(folder)])
        assert result.exit_code == 2 and "already exists and is neither empty nor a saved spaCy pipeline and nothing else" in plain(result.output)
    assert sorted(p.name for p in project.iterdir()) == ["config.cfg", "train.spacy"]
    (tmp_path / "empty").mkdir()
    invoke("assemble", tmp_path / "model", tmp_path / "empty")
    assert spacy.load(tmp_path / "empty").pipe_names == ["sentencizer", "elmo"]
    pipe = tmp_path / "pipe"
    invoke("convert", allennlp_fixture / "options.json", allennlp_fixture / "lm_weights.hdf5", pipe, "--no-sentencizer")
    (tmp_path / "pipe.old").mkdir()  # the user's own
    invoke("assemble", tmp_path / "model", pipe)  # replaces the converted pipeline whole
    assert spacy.load(pipe).pipe_names == ["sentencizer", "elmo"] and (tmp_path / "pipe.old").is_dir()
    invoke("warm", pipe, path, pipe, "--rows", "2")  # in place
    assert spacy.load(pipe).get_pipe("elmo").bilm.config.warm_state
    (pipe / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["assemble", str(tmp_path / "model"), str(pipe)])
    assert result.exit_code == 2 and "is neither empty nor a saved spaCy pipeline and nothing else" in plain(result.output) and (pipe / "notes.txt").is_file()
    (pipe / "notes.txt").unlink()
    monkeypatch.chdir(pipe / "elmo")
    result = runner.invoke(app, ["assemble", str(tmp_path / "model"), str(pipe)])
    assert result.exit_code == 2 and "holds the working directory" in plain(result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "model", "pipe", "pipe.old", "project", "sentences.txt"]  # no staging left
