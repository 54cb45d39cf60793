"""PNG figures: training curves, layer probes, mix weights, sense maps, and the CLI behind them."""

import json
import struct
import sys

import numpy
import pytest
import spacy
from typer.testing import CliRunner

from elmo_testing import plain
from spacy_elmo.analysis import plots
from spacy_elmo.analysis.senses import sense_map, word_uses
from spacy_elmo.analysis.vectors import elmo_pipeline, embed
from spacy_elmo.cli import app
from spacy_elmo.pipeline.architectures import mix_gamma, mix_weights

runner = CliRunner()
PROBE_REPORT = {
    "layers": ["layer 0", "layer 1", "layer 2", "mix"],
    "labels": {
        "tag": {"n_classes": 50, "n_train": 1000, "n_eval": 200, "baseline": 0.91, "accuracy": [0.90, 0.93, 0.92, 0.93]},
        "pos": {"n_classes": 17, "n_train": 1000, "n_eval": 200, "baseline": 0.88, "accuracy": [0.89, 0.95, 0.94, 0.95]},
    },
}


def png_size(data: bytes):
    """(width, height) from the PNG signature and IHDR chunk; fails on anything else."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def assert_a_picture(path, min_width=300, min_height=200):
    """A PNG of a real size whose pixels are not one flat colour."""
    import matplotlib.image

    width, height = png_size(path.read_bytes())
    assert width >= min_width and height >= min_height
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (height, width)
    assert len(numpy.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 10
    return pixels


def write_metrics(path, steps=50, log_every=5, eval_every=20, seconds_per_step=2.0, with_cut_line=True):
    """A metrics.jsonl as the trainer writes it: log lines, evaluation lines, a line cut by a kill."""
    lines = []
    for step in range(log_every, steps + 1, log_every):
        loss = 8.0 / (1 + step / 10)
        lines.append(
            {
                "step": step,
                "epoch": 0,
                "tokens": 1000 * step,
                "loss": loss,
                "train_perplexity": numpy.exp(loss),
                "tokens_per_second": 500.0 + step,
                "learning_rate": 0.001,
                "elapsed_seconds": seconds_per_step * step,
            }
        )
        if step % eval_every == 0:
            lines.append({"step": step, "dev_forward": 900.0 / step, "dev_backward": 1100.0 / step, "dev_mean": 1000.0 / step, "dev_predictions": 99})
    text = "".join(json.dumps(line) + "\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + ('{"step": 55, "los' if with_cut_line else ""), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bank_uses(tiny_model_dir):
    nlp = elmo_pipeline(tiny_model_dir)
    texts = ["the bank of the river", "a bank loan", "money in the bank", "river bank", "bank"]
    return word_uses(list(embed(nlp, [nlp.make_doc(t) for t in texts])), "bank")


def test_read_metrics_splits_log_and_evaluation_lines(tmp_path):
    run = plots.read_metrics(write_metrics(tmp_path / "run-a" / "metrics.jsonl", eval_every=20))
    assert run.label == "run-a"
    numpy.testing.assert_array_equal(run.steps, numpy.arange(5, 51, 5))
    numpy.testing.assert_array_equal(run.tokens, 1000 * numpy.arange(5, 51, 5))
    numpy.testing.assert_array_equal(run.dev_steps, [20, 40])
    numpy.testing.assert_allclose(run.dev_perplexity, [50.0, 25.0])
    numpy.testing.assert_allclose(run.dev_tokens, [20000, 40000])
    numpy.testing.assert_allclose(run.dev_seconds, [40.0, 80.0])


def test_evaluation_steps_between_and_after_log_lines_are_interpolated():
    known, values = numpy.array([10.0, 20.0]), numpy.array([100.0, 300.0])
    numpy.testing.assert_allclose(plots.along_steps(numpy.array([5.0, 15.0, 25.0]), known, values), [50.0, 200.0, 400.0])


def test_read_metrics_names_a_file_without_log_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 10, "dev_mean": 3.0}\n')
    with pytest.raises(plots.NoTrainingSteps, match="metrics.jsonl: the run logged no training steps"):
        plots.read_metrics(path)  # a run shorter than its log interval
    path.write_text('{"epoch": 1}\n')
    with pytest.raises(ValueError, match="holds no training log lines"):
        plots.read_metrics(path)
    with pytest.raises(ValueError, match="metrics file not found"):
        plots.read_metrics(tmp_path / "absent.jsonl")


def test_training_curves_of_one_and_of_two_runs(tmp_path):
    first = write_metrics(tmp_path / "a" / "metrics.jsonl")
    second = write_metrics(tmp_path / "b" / "metrics.jsonl", steps=80, seconds_per_step=1.0)
    one = plots.plot_training_curves([first], tmp_path / "one.png")
    two = plots.plot_training_curves([first, second], tmp_path / "two.png", labels=["slow", "fast"])
    assert one == tmp_path / "one.png"
    pixels_one, pixels_two = assert_a_picture(one, 1000, 600), assert_a_picture(two, 1000, 600)
    assert not numpy.array_equal(pixels_one, pixels_two)  # the second run is drawn
    with pytest.raises(ValueError, match="1 labels given for 2 metrics files"):
        plots.plot_training_curves([first, second], tmp_path / "x.png", labels=["one"])


def test_training_curves_without_evaluations(tmp_path):
    path = write_metrics(tmp_path / "metrics.jsonl", eval_every=1000)
    assert plots.read_metrics(path).dev_perplexity.size == 0
    assert_a_picture(plots.plot_training_curves([path], tmp_path / "curves.png"))


def test_probe_accuracies(tmp_path):
    report = tmp_path / "probe.json"
    report.write_text(json.dumps(PROBE_REPORT))
    assert_a_picture(plots.plot_probes(report, tmp_path / "probes.png"), 600, 300)
    assert_a_picture(plots.plot_probes({"layers": ["layer 0"], "labels": {"dep": {"accuracy": [0.5]}}}, tmp_path / "one.png"))


def test_a_probe_report_without_an_accuracy_per_layer_is_an_error(tmp_path):
    broken = {"layers": ["layer 0", "layer 1"], "labels": {"tag": {"accuracy": [0.9]}}}
    with pytest.raises(ValueError, match="label 'tag' needs 'accuracy', one value for each of the 2 layers"):
        plots.plot_probes(broken, tmp_path / "x.png")
    with pytest.raises(ValueError, match="expected an object with 'layers'"):
        plots.check_probe_report([1, 2])


def test_pipeline_mixes_are_the_trained_mix_weights(trained_pipeline):
    nlp = spacy.load(trained_pipeline)
    found = plots.pipeline_mixes(nlp)
    assert sorted(found) == ["morphologizer", "tagger"]
    for name, (mix,) in nlp.get_pipe("elmo").mixes.items():
        numpy.testing.assert_array_equal(found[name].weights, mix_weights(mix))
        assert found[name].gamma == mix_gamma(mix)
        assert found[name].weights.sum() == pytest.approx(1.0)
        assert not numpy.allclose(found[name].weights, 1 / 3, atol=1e-4)  # trained, not the initial average
    assert not numpy.allclose(found["tagger"].weights, found["morphologizer"].weights)


def test_pipeline_mixes_needs_an_elmo_component():
    with pytest.raises(ValueError, match="no elmo component"):
        plots.pipeline_mixes(spacy.blank("en"))


def test_mix_weights_figure(trained_pipeline, tmp_path):
    assert_a_picture(plots.plot_mix_weights(trained_pipeline, tmp_path / "mix.png"))
    with pytest.raises(ValueError, match="no trained ELMo mixes"):
        plots.mix_weights_figure({})


def test_sense_map_by_cluster_and_by_label(bank_uses, tmp_path):
    clustered = assert_a_picture(plots.plot_sense_map(sense_map(bank_uses, clusters=2), tmp_path / "clusters.png"))
    labels = ["river", "money", "money", "river", "none"]
    labelled = assert_a_picture(plots.plot_sense_map(sense_map(bank_uses, labels=labels), tmp_path / "labels.png"))
    assert not numpy.array_equal(clustered, labelled)


def test_a_png_into_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="output directory not found"):
        plots.plot_probes(PROBE_REPORT, tmp_path / "absent" / "x.png")


@pytest.fixture
def no_matplotlib(monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # `import` now raises ImportError


def test_without_matplotlib_plots_say_how_to_get_it(no_matplotlib, tmp_path):
    with pytest.raises(ImportError, match=r"plots need matplotlib: pip install 'spacy-elmo\[plots\]'"):
        plots.plot_probes(PROBE_REPORT, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
    assert plots.read_metrics(write_metrics(tmp_path / "metrics.jsonl")).steps.size == 10  # the data side needs no matplotlib


def test_without_matplotlib_the_cli_gives_a_one_line_error(no_matplotlib, tmp_path):
    report = tmp_path / "probe.json"
    report.write_text(json.dumps(PROBE_REPORT))
    result = runner.invoke(app, ["plot", "probes", str(report), "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2
    assert "plots need matplotlib: pip install 'spacy-elmo[plots]'" in plain(result.output)
    assert "Traceback" not in result.output


def test_plot_commands_write_pngs(tmp_path, trained_pipeline, tiny_model_dir):
    metrics = write_metrics(tmp_path / "run" / "metrics.jsonl")
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(PROBE_REPORT))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the bank of the river\nno such word\na bank loan and a river bank\n")
    labels = tmp_path / "labels.txt"
    labels.write_text("river\nmoney\nriver\n")
    commands = {
        "curves.png": ["plot", "curves", str(metrics), str(metrics), "--label", "a", "--label", "b"],
        "probes.png": ["plot", "probes", str(probe)],
        "mix.png": ["plot", "mix", str(trained_pipeline)],
        "senses.png": ["plot", "senses", str(tiny_model_dir), str(corpus), "--word", "bank", "--layer", "1"],
        "labels.png": ["plot", "senses", str(tiny_model_dir), str(corpus), "--word", "bank", "--labels", str(labels)],
    }
    for name, command in commands.items():
        result = runner.invoke(app, command + ["-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert_a_picture(tmp_path / name)
    assert "3 uses of 'bank'" in runner.invoke(app, commands["senses.png"] + ["-o", str(tmp_path / "again.png")]).output


def test_plot_senses_of_an_absent_word_is_a_clean_error(tmp_path, tiny_model_dir):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the river\n")
    result = runner.invoke(app, ["plot", "senses", str(tiny_model_dir), str(corpus), "--word", "bank", "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "'bank' does not occur in the corpus" in plain(result.output)
