"""The one-page HTML report: valid HTML, its sections, embedded PNGs, and absent inputs."""

import base64
import json
import os
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser

import numpy
import pytest
import spacy
from typer.testing import CliRunner

from elmo_testing import fill_the_disk_before_renames, kept_after_a_failed_write, plain, random_bilm
from spacy_elmo.analysis.plots import pipeline_mixes
from spacy_elmo.analysis.report import write_report
from spacy_elmo.cli import app
from spacy_elmo.io import save_model

runner = CliRunner()
VOID = {"meta", "img", "br", "hr", "link", "input"}
SECTIONS = ["model", "training", "layer-probes", "senses", "mix-weights"]
PROBE_REPORT = {
    "layers": ["layer 0", "layer 1", "layer 2", "mix"],
    "labels": {"tag": {"n_classes": 5, "n_train": 100, "n_eval": 20, "baseline": 0.61, "accuracy": [0.7, 0.8, 0.75, 0.85]}},
}
BANK_LINES = [
    "I sat on the bank of the river .",
    "The bank approved the loan .",
    "We fished from the bank .",
    "The bank raised its rates .",
    "Grass grew on the river bank .",
    "She works at a bank in town .",
    "The bank was steep and muddy .",
    "My bank sent a letter .",
    "Ducks rested on the bank .",
    "The bank closed early today .",
]


class Page(HTMLParser):
    """Parses a page, checking that every tag is closed in order, and collects ids, images and absent lines."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.stack, self.ids, self.images, self.absent, self._in_absent = [], [], [], [], False
        self.feed(text)
        self.close()
        assert self.stack == [], f"unclosed tags {self.stack}"

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "img":
            self.images.append(attrs["src"])
        self._in_absent = attrs.get("class") == "absent"
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert tag not in VOID
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        if self._in_absent and data.strip():
            self.absent.append(data.strip())
            self._in_absent = False


def embedded_png(src: str):
    """(width, height) of a data:image/png;base64 image."""
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    data = base64.b64decode(src[len(prefix) :], validate=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def write_metrics(path, steps=40):
    lines = []
    for step in range(5, steps + 1, 5):
        lines.append(
            {
                "step": step,
                "epoch": 0,
                "tokens": 800 * step,
                "loss": 6.0 - step / 20,
                "train_perplexity": 100.0,
                "tokens_per_second": 400.0,
                "learning_rate": 0.002,
                "elapsed_seconds": 2.0 * step,
            }
        )
        if step % 20 == 0:
            lines.append({"step": step, "dev_forward": 90.0, "dev_backward": 110.0, "dev_mean": 2000.0 / step, "dev_predictions": 50})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A spaCy-project-like folder: a pretraining run (model-best, metrics, pretrain.cfg), its
    prepared corpus with stats.json, an evaluation in metrics/, and a probe report."""
    root = tmp_path_factory.mktemp("project")
    model = root / "training" / "model-best"
    save_model(random_bilm(), model)
    (model / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nbank\nriver\n", encoding="utf-8")
    (model / "training.json").write_text(json.dumps({"step": 40, "tokens": 32000, "dev_mean": 50.0}), encoding="utf-8")
    write_metrics(root / "training" / "metrics.jsonl")
    (root / "training" / "pretrain.cfg").write_text('[paths]\ncorpus = "corpus"\n', encoding="utf-8")
    (root / "corpus").mkdir()
    (root / "corpus" / "stats.json").write_text(json.dumps({"documents": 12, "vocab_size": 345}), encoding="utf-8")
    (root / "corpus" / "dev.txt").write_text("\n".join(BANK_LINES * 2) + "\n", encoding="utf-8")
    (root / "metrics").mkdir()
    evaluation = {"forward": 210.0, "backward": 190.0, "mean": 199.5, "model": "training/model-best", "text": "corpus/test.txt"}
    (root / "metrics" / "test.json").write_text(json.dumps(evaluation), encoding="utf-8")
    (root / "probe.json").write_text(json.dumps(PROBE_REPORT), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def full_report(project, tmp_path_factory):
    output = tmp_path_factory.mktemp("report") / "report.html"
    write_report(project / "training" / "model-best", output, corpus=project / "corpus" / "dev.txt", limit=15, probe=project / "probe.json")
    return output


def test_the_report_is_valid_html_with_every_section(full_report):
    text = full_report.read_text(encoding="utf-8")
    page = Page(text)
    assert [i for i in page.ids if i in SECTIONS] == SECTIONS
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text and "<link" not in text and "url(" not in text  # nothing to fetch, nothing to run
    assert len(page.images) == 3  # curves, probes, the sense map of the one frequent content word
    for src in page.images:
        width, height = embedded_png(src)
        assert width >= 400 and height >= 300


def test_the_model_card_gathers_what_the_run_recorded(full_report, project):
    text = full_report.read_text(encoding="utf-8")
    parameters = sum(p.numel() for p in random_bilm().parameters())
    assert f"<td>parameters</td><td>{parameters:,}</td>" in text
    assert "<td>lstm_dim</td><td>12</td>" in text and "<td>softmax vocabulary</td><td>5</td>" in text
    assert "<td>tokens</td><td>32,000</td>" in text  # training.json
    assert "<td>corpus/test.txt</td><td>199.50</td><td>210.00</td><td>190.00</td>" in text  # metrics/test.json names this model
    assert f"Corpus statistics ({project / 'corpus' / 'stats.json'})" in text and "<td>vocab_size</td><td>345</td>" in text


def test_the_training_section_summarizes_the_metrics(full_report):
    text = full_report.read_text(encoding="utf-8")
    assert "<td>steps</td><td>40</td>" in text and "<td>training time</td><td>0:01:20</td>" in text
    assert "<td>best dev perplexity</td><td>50.00 at step 40</td>" in text
    assert "<summary>pretrain.cfg</summary>" in text


def test_the_probe_and_sense_sections_show_their_inputs(full_report):
    text = full_report.read_text(encoding="utf-8")
    assert "<tr><td>tag</td><td>0.700</td><td>0.800</td><td>0.750</td><td>0.850</td><td>0.610</td></tr>" in text
    assert "15 docs of" in text
    assert "<td>bank</td><td>15</td>" in text  # 15 uses: the only content word used 8 times or more, alone in the spread table
    assert "<h3>bank</h3>" in text and '<span class="word">bank</span>' in text


def test_the_mix_section_of_a_trained_pipeline(trained_pipeline, tmp_path):
    output = write_report(trained_pipeline, tmp_path / "pipeline.html")
    text = output.read_text(encoding="utf-8")
    page = Page(text)
    assert len(page.images) == 1 and embedded_png(page.images[0])[0] >= 400
    for name, mix in pipeline_mixes(spacy.load(trained_pipeline)).items():
        cells = "".join(f"<td>{w:.3f}</td>" for w in mix.weights)
        assert f"<tr><td>{name}</td>{cells}<td>{mix.gamma:.3f}</td></tr>" in text


def test_absent_inputs_give_one_line_each(tiny_model_dir, tmp_path, monkeypatch):
    text = write_report(tiny_model_dir, tmp_path / "bare.html").read_text(encoding="utf-8")
    page = Page(text)
    assert page.images == []
    assert [i for i in page.ids if i in SECTIONS] == SECTIONS
    assert page.absent == [
        "No training.json in the model directory: no training record.",
        "No perplexity evaluations given (--evaluation FILE, from `python -m spacy_elmo evaluate --output`).",
        "No corpus statistics (stats.json) found beside --corpus or at the training's paths.corpus.",
        "No metrics.jsonl given (--metrics) or found beside the model: no training curves.",
        "No probe report given (--probe PATH) or found beside the model (probe.json): no layer probes. "
        "`python -m spacy_elmo probe MODEL DATA --output probe.json` writes one.",
        "No corpus given (--corpus PATH): no sense maps.",
        "MODEL is not a spaCy pipeline: no downstream mix weights.",
    ]
    fill_the_disk_before_renames(monkeypatch)
    with pytest.raises(OSError, match="bare.html: could not be written"):
        write_report(tiny_model_dir, tmp_path / "bare.html")
    assert kept_after_a_failed_write(tmp_path / "bare.html", text)


def test_a_run_that_logged_no_training_step_yet_has_a_report_without_curves(tiny_model_dir, tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 3, "dev_mean": 40.0}\n')
    page = Page(write_report(tiny_model_dir, tmp_path / "short.html", metrics=tmp_path / "metrics.jsonl").read_text(encoding="utf-8"))
    assert (
        f"{tmp_path / 'metrics.jsonl'}: the run logged no training steps (it ended before its first log line, every log_every steps): no training curves."
        in page.absent
    )


def test_a_layer_the_model_lacks_is_an_error_before_the_corpus_is_read(tiny_model_dir, tmp_path, monkeypatch):
    from spacy_elmo.analysis import report

    def unread(*args, **kwargs):
        raise AssertionError("the corpus was read")

    monkeypatch.setattr(report, "read_docs", unread)
    with pytest.raises(ValueError, match="layer -4 does not exist: the model has layers 0..2"):
        write_report(tiny_model_dir, tmp_path / "r.html", corpus=tmp_path / "corpus.txt", layer=-4)
    assert not (tmp_path / "r.html").exists()


def test_a_probe_report_beside_the_model_is_found(project, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(project / "training" / "model-best", run / "model-best")
    shutil.copy(project / "probe.json", run / "probe.json")
    text = write_report(run / "model-best", tmp_path / "found.html").read_text(encoding="utf-8")
    assert f"from {run / 'probe.json'}" in text
    assert len(Page(text).images) == 1  # the probe figure


def test_given_evaluations_and_words(project, tmp_path):
    evaluation = tmp_path / "dev.json"
    evaluation.write_text(json.dumps({"forward": 3.0, "backward": 5.0, "mean": 4.0, "text": "dev.txt"}))
    output = write_report(
        project / "training" / "model-best",
        tmp_path / "words.html",
        corpus=project / "corpus" / "dev.txt",
        evaluations=[evaluation],
        words=["river", "absent"],
        clusters=1,
    )
    text = output.read_text(encoding="utf-8")
    assert "<td>dev.txt</td><td>4.00</td><td>3.00</td><td>5.00</td>" in text and "corpus/test.txt" not in text
    assert "Words as given." in text and "<h3>river</h3>" in text
    assert "'absent' does not occur in the corpus" in Page(text).absent
    with pytest.raises(ValueError, match="not a perplexity evaluation"):
        write_report(project / "training" / "model-best", tmp_path / "x.html", evaluations=[project / "probe.json"])


def test_without_matplotlib_the_report_says_so_in_place_of_figures(project, tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    output = write_report(project / "training" / "model-best", tmp_path / "plain.html", probe=project / "probe.json")
    page = Page(output.read_text(encoding="utf-8"))
    assert page.images == []
    assert page.absent.count("plots need matplotlib: pip install 'spacy-elmo[plots]'") == 2


def test_the_report_command(project, tmp_path):
    output = tmp_path / "cli.html"
    result = runner.invoke(app, ["report", str(project / "training" / "model-best"), "-o", str(output), "--probe", str(project / "probe.json")])
    assert result.exit_code == 0, result.output
    assert f"report -> {output}" in result.output
    assert len(Page(output.read_text(encoding="utf-8")).images) == 2
    bad = runner.invoke(app, ["report", str(project / "training" / "model-best"), "-o", str(output), "--probe", str(tmp_path / "none.json")])
    assert bad.exit_code == 2 and f"{tmp_path / 'none.json'}: probe report not found" in plain(bad.output)


def chromium_binary():
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome", "chrome") if shutil.which(name)), None)


@pytest.mark.slow
def test_the_report_renders_in_a_headless_browser(full_report, tmp_path):
    import matplotlib.image

    browser = chromium_binary()
    if browser is None:
        pytest.skip("no chromium binary found (chromium, chromium-browser, google-chrome or chrome on PATH)")
    screenshot = tmp_path / "report.png"
    command = [browser, "--headless", "--disable-gpu", "--hide-scrollbars", f"--screenshot={screenshot}", "--window-size=1200,3000"]
    if os.geteuid() == 0:
        command.append("--no-sandbox")
    subprocess.run(command + [full_report.as_uri()], capture_output=True, timeout=120, check=True)
    pixels = matplotlib.image.imread(screenshot)[..., :3]
    assert pixels.shape[:2] == (3000, 1200)
    colours = numpy.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 50
    assert (pixels < 0.95).any(axis=-1).mean() > 0.03
