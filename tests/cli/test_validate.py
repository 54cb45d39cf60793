"""`validate`: every kind of stored biLM is recognised and described, and every problem of
a damaged one is listed with its file, with a non-zero exit status."""

import json
import shutil
from pathlib import Path
from typing import Callable, Dict

import h5py
import numpy
import pytest
import spacy
import torch
from typer.testing import CliRunner, Result

from elmo_testing import DEMO_PRETRAIN_CONFIG, TINY_CONFIG, random_bilm, tiny_pretrain_overrides
from spacy_elmo.cli import app
from spacy_elmo.io import load_model, load_public_model, save_public_model
from spacy_elmo.io.validate import weights_checksum
from spacy_elmo.training.checkpoint import corpus_fingerprint
from spacy_elmo.training.config import load_config
from spacy_elmo.training.data import train_shards
from spacy_elmo.training.trainer import pretrain

LSTM_WEIGHT = "forward_stack.layers.0.input_weight"


def validate(*args: object) -> Result:
    """`python -m spacy_elmo validate ARGS...`, in process."""
    return CliRunner().invoke(app, ["validate", *map(str, args)])


def checksum_line(result: Result) -> str:
    """The weights checksum the command printed."""
    (line,) = [line for line in result.output.splitlines() if line.startswith("  weights sha256: ")]
    return line.split(": ")[1]


def assert_problems(result: Result, *problems: str) -> None:
    """Exit status 1 and exactly these problems (each a substring of its own line)."""
    assert result.exit_code == 1, result.output
    assert f"{len(problems)} problem{'s' if len(problems) > 1 else ''} found:" in result.output
    listed = [line for line in result.output.splitlines() if line.startswith("  - ")]
    assert len(listed) == len(problems), result.output
    for problem, line in zip(problems, listed):
        assert problem in line, result.output


@pytest.fixture(scope="module")
def trained(toy_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of a 2-step tiny pretraining on the toy corpus."""
    output = tmp_path_factory.mktemp("trained") / "out"
    overrides = tiny_pretrain_overrides(toy_corpus, max_steps=2, eval_every=2, checkpoint_every=2)
    pretrain(load_config(DEMO_PRETRAIN_CONFIG, overrides), output, progress_bar=False)
    return output


def copy_dir(source: Path, target: Path) -> Path:
    """A copy of `source` at `target`, to damage."""
    shutil.copytree(source, target)
    return target


def rewrite_npz(path: Path, change: Callable[[Dict[str, numpy.ndarray]], None]) -> None:
    """Apply `change` to the arrays of a .npz file and write them back."""
    with numpy.load(path) as archive:
        arrays: Dict[str, numpy.ndarray] = {name: archive[name] for name in archive.files}
    change(arrays)
    numpy.savez(path, **arrays)


def test_a_model_directory_is_described_with_shapes_size_and_checksum(tiny_model_dir: Path) -> None:
    result = validate(tiny_model_dir)
    assert result.exit_code == 0, result.output
    bilm = load_model(tiny_model_dir)
    assert result.output.startswith(f"{tiny_model_dir}: spacy-elmo model directory\n")
    assert "  LSTM: 2 layers per direction, 12 cells projected to 6, skip connections on" in result.output
    assert "  token encoder: char-CNN, 28 filters of widths 1-3 over 4-wide character embeddings, 1 highway layers" in result.output
    assert "  output: 3 layers of width 12\n  vocabulary: 262 character ids" in result.output
    assert f"  parameters: {sum(p.numel() for p in bilm.parameters()):,} (biLM)" in result.output
    assert checksum_line(result) == weights_checksum(bilm)
    assert result.output.rstrip().endswith("No problems found.")


def test_a_word_model_and_a_pipeline_are_recognised(tiny_word_model_dir: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    result = validate(tiny_word_model_dir)
    assert result.exit_code == 0 and "  vocabulary: 11 words" in result.output and "word table, 11 words of width 6" in result.output
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    nlp.to_disk(tmp_path / "pipeline")
    result = validate(tmp_path / "pipeline")
    assert result.exit_code == 0, result.output
    assert "spaCy pipeline with an elmo component" in result.output and "  elmo component: elmo/" in result.output
    assert checksum_line(result) == checksum_line(validate(tiny_model_dir))
    config = (tmp_path / "pipeline" / "config.cfg").read_text().replace('factory = "elmo"', 'factory = "tok2vec"')
    (tmp_path / "pipeline" / "config.cfg").write_text(config)
    assert_problems(validate(tmp_path / "pipeline"), "config.cfg: [components.elmo] has factory 'tok2vec'")


def test_public_weights_are_described_and_hashed_like_the_same_weights_in_a_model_directory(
    allennlp_fixture: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    weights, options = allennlp_fixture / "lm_weights.hdf5", allennlp_fixture / "options.json"
    result = validate(weights, "--options", options)
    assert result.exit_code == 0, result.output
    assert "public ELMo weights (hdf5 + options.json)" in result.output and "64 cells projected to 16" in result.output
    assert checksum_line(result) == weights_checksum(load_public_model(options, weights))
    save_public_model(load_model(tiny_model_dir), tmp_path / "options.json", tmp_path / "weights.hdf5")
    exported = validate(tmp_path / "weights.hdf5", "--options", tmp_path / "options.json")
    assert checksum_line(exported) == checksum_line(validate(tiny_model_dir))
    assert_problems(validate(weights), "lm_weights.hdf5: a public ELMo weight file: give its options.json with --options")


def test_a_training_run_is_described_from_its_model_and_its_checkpoints(trained: Path, toy_corpus: Path) -> None:
    model = validate(trained / "model-last")
    assert model.exit_code == 0, model.output
    vocab_size = len((toy_corpus / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert "from pretraining (with its softmax)" in model.output
    assert f"  softmax: {vocab_size} words x 8 (softmax.npz and vocab.txt agree)" in model.output
    assert "  training: step 2, tokens" in model.output
    fingerprint = corpus_fingerprint(toy_corpus / "vocab.txt", train_shards(toy_corpus), toy_corpus / "dev.txt")
    for name in ("last.pt", "best.pt"):
        checkpoint = validate(trained / "checkpoints" / name)
        assert checkpoint.exit_code == 0, checkpoint.output
        assert f"{trained / 'checkpoints' / name}: training checkpoint" in checkpoint.output
        assert "  training: step 2, " in checkpoint.output and "  processes: 1" in checkpoint.output
        assert f"  corpus: vocab.txt sha256 {fingerprint['vocab_sha256']}, {len(fingerprint['shards'])} training shards" in checkpoint.output
        assert f"  softmax: full, {vocab_size} words x 8" in checkpoint.output
        assert checksum_line(checkpoint) == checksum_line(model)


def test_a_truncated_weight_file_and_a_missing_one_are_problems(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = copy_dir(tiny_model_dir, tmp_path / "model")
    data = (model / "weights.npz").read_bytes()
    (model / "weights.npz").write_bytes(data[: len(data) // 2])
    assert_problems(validate(model), f"{model / 'weights.npz'}: not a readable weight archive, it may be truncated")
    (model / "weights.npz").unlink()
    config = json.loads((model / "config.json").read_text())
    config["bilm"]["n_layers"] = 0
    (model / "config.json").write_text(json.dumps(config))
    assert_problems(
        validate(model),
        f"{model / 'config.json'}: invalid biLM configuration (Invalid biLM configuration: n_layers must be positive)",
        f"{model / 'weights.npz'}: weight file not found",
    )


def test_every_bad_tensor_of_a_model_directory_is_listed(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = copy_dir(tiny_model_dir, tmp_path / "model")

    def damage(arrays: Dict[str, numpy.ndarray]) -> None:
        arrays[LSTM_WEIGHT][0, 0] = numpy.nan
        arrays["backward_stack.layers.1.bias"] = arrays["backward_stack.layers.1.bias"][:-1]
        arrays["token_encoder.projection.bias"][:2] = numpy.inf
        arrays["token_encoder.projection.weight"] = arrays["token_encoder.projection.weight"].astype(numpy.float64) * 1e300

    rewrite_npz(model / "weights.npz", damage)
    weights = model / "weights.npz"
    result = validate(model)
    assert_problems(
        result,
        f"{weights}: {LSTM_WEIGHT} holds 1 NaN and 0 infinite values",
        f"{weights}: token_encoder.projection.bias holds 0 NaN and 2 infinite values",
        f"{weights}: token_encoder.projection.weight holds values beyond float32's range",
        f"{weights}: backward_stack.layers.1.bias has shape (47,), {model / 'config.json'} calls for (48,)",
    )
    assert "weights sha256" not in result.output


def test_a_word_model_without_its_vocabulary_or_with_too_few_words_is_a_problem(tiny_word_model_dir: Path, tmp_path: Path) -> None:
    model = copy_dir(tiny_word_model_dir, tmp_path / "model")
    words = json.loads((model / "words.json").read_text())
    (model / "words.json").unlink()
    assert_problems(validate(model), f"{model / 'words.json'}: a word-level biLM needs its vocabulary file, which is missing")
    (model / "words.json").write_text(json.dumps(words[:-1]))
    assert_problems(validate(model), f"{model / 'words.json'}: lists 10 words, {model / 'weights.npz'} has 11 rows")


def test_a_vocabulary_that_disagrees_with_the_softmax_is_a_problem(trained: Path, tmp_path: Path) -> None:
    model = copy_dir(trained / "model-last", tmp_path / "model")
    lines = (model / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (model / "vocab.txt").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    assert_problems(validate(model), f"{model / 'softmax.npz'}: softmax is ({len(lines)}, 8), expected ({len(lines) - 1}, 8)")
    (model / "vocab.txt").unlink()
    assert_problems(validate(model), f"{model / 'vocab.txt'}: vocabulary file not found")


def test_a_text_file_or_a_truncated_file_as_checkpoint_is_a_problem(trained: Path, tmp_path: Path) -> None:
    (tmp_path / "last.pt").write_text("step 10, loss 3.2\n")
    assert_problems(validate(tmp_path / "last.pt"), f"{tmp_path / 'last.pt'}: not a readable checkpoint: not a file torch.save writes")
    data = (trained / "checkpoints" / "last.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    assert_problems(validate(tmp_path / "cut.pt"), f"{tmp_path / 'cut.pt'}: not a readable checkpoint: cut short or damaged")


def test_every_bad_tensor_of_a_checkpoint_is_listed(trained: Path, tmp_path: Path) -> None:
    content = torch.load(trained / "checkpoints" / "last.pt", weights_only=True)
    objective = content["objective"]
    objective["head.weight"] = objective["head.weight"][:, :-1]
    torch.save(content, tmp_path / "softmax.pt")
    result = validate(tmp_path / "softmax.pt")
    problem = f"{tmp_path / 'softmax.pt'} (softmax): weight has shape ({objective['head.bias'].shape[0]}, 7), the checkpoint's [model] config calls for"
    assert_problems(result, problem)
    assert "  training: step 2, " in result.output and checksum_line(result) == checksum_line(validate(trained / "model-last"))
    objective["bilm." + LSTM_WEIGHT][1, 2] = float("nan")
    next(iter(content["optimizer"]["state"].values()))["exp_avg"].view(-1)[0] = float("inf")
    torch.save(content, tmp_path / "bad.pt")
    path = tmp_path / "bad.pt"
    result = validate(path)
    assert_problems(
        result,
        f"{path}: bilm.{LSTM_WEIGHT} holds 1 NaN and 0 infinite values",
        problem.replace("softmax.pt", "bad.pt"),
        f"{path}: optimizer state of parameter 0: exp_avg holds 0 NaN and 1 infinite values",
    )
    assert "weights sha256" not in result.output


def test_every_bad_dataset_of_public_weights_is_listed(allennlp_fixture: Path, tmp_path: Path) -> None:
    weights, options = tmp_path / "weights.hdf5", allennlp_fixture / "options.json"
    shutil.copy(allennlp_fixture / "lm_weights.hdf5", weights)
    weights.chmod(0o644)
    with h5py.File(weights, "r+") as handle:
        handle["CNN/b_cnn_0"][1] = numpy.nan
        del handle["CNN_high_1/b_carry"]
        handle.create_dataset("CNN_high_1/b_carry", data=numpy.zeros(3, dtype=numpy.float32))
    assert_problems(
        validate(weights, "--options", options),
        f"{weights}: CNN/b_cnn_0 holds 1 NaN and 0 infinite values",
        f"{weights}: dataset 'CNN_high_1/b_carry' has shape (3,), the options in {options} call for (124,)",
    )
    bad_options = tmp_path / "options.json"
    bad_options.write_text(json.dumps({"char_cnn": {}}))
    assert_problems(
        validate(weights, "--options", bad_options),
        f"{bad_options}: options file lacks the key 'lstm'",
        f"{weights}: CNN/b_cnn_0 holds 1 NaN",
    )
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 3])
    assert_problems(validate(weights, "--options", options), f"{weights}: not a readable HDF5 weight file, it may be truncated")


def test_a_missing_path_or_an_unknown_file_is_a_problem(tmp_path: Path) -> None:
    assert_problems(validate(tmp_path / "nothing"), f"{tmp_path / 'nothing'}: not found")
    (tmp_path / "notes.txt").write_text("hello")
    assert_problems(validate(tmp_path / "notes.txt"), "not a model directory, spaCy pipeline, public .hdf5 weight file or training checkpoint")
    assert_problems(validate(tmp_path), f"{tmp_path}: neither a spacy-elmo model directory nor a spaCy pipeline")


def test_a_model_directorys_weight_file_is_not_taken_for_a_checkpoint(tiny_model_dir: Path) -> None:
    weights = tiny_model_dir / "weights.npz"
    assert_problems(validate(weights), f"{weights}: one file of a model directory: give the directory ({tiny_model_dir})")


def test_the_checksum_covers_every_tensor(tiny_model_dir: Path) -> None:
    bilm = load_model(tiny_model_dir)
    before = weights_checksum(bilm)
    assert weights_checksum(load_model(tiny_model_dir)) == before
    with torch.no_grad():
        bilm.state_dict()["backward_stack.layers.1.bias"][-1] += 1e-6
    assert weights_checksum(bilm) != before
    assert weights_checksum(random_bilm(TINY_CONFIG, seed=1)) != weights_checksum(random_bilm(TINY_CONFIG, seed=0))


def test_options_that_call_for_a_huge_biLM_are_checked_without_building_it(allennlp_fixture: Path, tmp_path: Path) -> None:
    """A biLM of 4 * 10**7 cells would take petabytes: validate reads its shapes off a
    skeleton that holds no values, and lists what the weights lack."""
    weights = allennlp_fixture / "lm_weights.hdf5"
    options = json.loads((allennlp_fixture / "options.json").read_text())
    options["lstm"]["dim"] = 4 * 10**7
    huge = tmp_path / "options.json"
    huge.write_text(json.dumps(options))
    result = validate(weights, "--options", huge)
    assert result.exit_code == 1
    assert (
        f"{weights}: dataset 'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape (32, 256), the options in {huge} call for (32, 160000000)" in result.output
    )
