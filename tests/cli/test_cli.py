"""`python -m spacy_elmo`: the demo (the README's main job) and info."""

import re
import shutil
import subprocess
import sys

from typer.testing import CliRunner

from spacy_elmo.cli import app

runner = CliRunner()


def test_demo_prints_similarities_with_the_golden_model(allennlp_fixture):
    result = runner.invoke(app, ["demo", "--weights", str(allennlp_fixture / "lm_weights.hdf5"), "--options", str(allennlp_fixture / "options.json")])
    assert result.exit_code == 0, result.output
    assert "doc._.elmo.layers (3, 13, 32)" in result.output
    rows = [line.split() for line in result.output.splitlines() if line.startswith("  ")]
    assert len(rows) == 4
    matrix = [[float(x) for x in row] for row in rows]
    assert all(abs(matrix[i][i] - 1.0) < 1e-3 for i in range(4))
    assert any(matrix[i][j] < 0.99 for i in range(4) for j in range(4) if i != j)


def test_demo_default_is_the_projects_model_as_a_module(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "training" / "model-best")
    result = subprocess.run([sys.executable, "-m", "spacy_elmo", "demo"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "training/model-best" in result.stdout and "cosine of 'bank'" in result.stdout


def test_demo_without_a_model_says_where_to_get_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["demo"])
    assert result.exit_code != 0
    assert "spacy project run all" in result.output and "--weights" in result.output


def test_info_prints_the_configuration(tiny_model_dir):
    result = runner.invoke(app, ["info", str(tiny_model_dir)])
    assert result.exit_code == 0, result.output
    assert "lstm_dim" in result.output and "12" in result.output
    assert "parameters" in result.output


def test_info_on_a_missing_model_names_it(tmp_path):
    result = runner.invoke(app, ["info", str(tmp_path / "absent")])
    assert result.exit_code == 2  # a usage error, not a traceback
    assert "absent: weights not found" in " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
