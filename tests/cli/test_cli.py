"""`python -m spacy_elmo`: the demo (the README's main job), info, and how a process ends."""

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from typer.testing import CliRunner

from elmo_testing import plain
from spacy_elmo.cli import app
from spacy_elmo.cli.app import exit_status, parse_mix

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


def test_demo_and_info_on_a_missing_model_name_it(tmp_path):
    for command in (["demo", "--weights"], ["info"]):
        result = runner.invoke(app, [*command, str(tmp_path / "absent")])
        assert result.exit_code == 2  # a usage error, not a traceback
        assert "absent: weights not found" in plain(result.output)


@pytest.mark.parametrize("command", ["assemble", "convert", "warm"])
def test_an_unknown_language_is_a_one_line_error(command, tiny_model_dir, allennlp_fixture, tmp_path):
    (tmp_path / "text.txt").write_text("The bank .\n", encoding="utf-8")
    inputs = {
        "assemble": [str(tiny_model_dir)],
        "convert": [str(allennlp_fixture / "options.json"), str(allennlp_fixture / "lm_weights.hdf5")],
        "warm": [str(tiny_model_dir), str(tmp_path / "text.txt")],
    }[command]
    result = runner.invoke(app, [command, *inputs, str(tmp_path / "out"), "--lang", "zz"])
    assert result.exit_code == 2 and "--lang 'zz': spaCy cannot make this language's tokenizer here" in plain(result.output)
    assert not (tmp_path / "out").exists()


def test_info_prints_the_configuration(tiny_model_dir):
    result = runner.invoke(app, ["info", str(tiny_model_dir)])
    assert result.exit_code == 0, result.output
    assert "lstm_dim" in result.output and "12" in result.output
    assert "parameters" in result.output


RUN_WITH_AN_EXIT_HANDLER = "; ".join(
    [
        "import atexit, sys",
        "atexit.register(print, 'teardown ran')",
        "print('started')",
        "from spacy_elmo.cli import run_app",
        "sys.argv[0] = 'spacy_elmo'",
        "run_app()",
    ]
)
"""`python -m spacy_elmo ARGS`, after an unflushed print and with an exit handler that
reports Python's teardown."""


@pytest.mark.parametrize("world_size", ["1", "2"])
def test_a_torchrun_process_ends_without_teardown_with_its_status_and_output(tiny_model_dir, tmp_path, world_size):
    """One of several torchrun processes (WORLD_SIZE > 1) skips the interpreter's teardown,
    where gloo's threads can abort it, yet keeps its exit status and all of its output
    (piped, so block-buffered: nothing of it may be lost)."""
    env = {**{key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}, "WORLD_SIZE": world_size}
    good, bad = (
        subprocess.run([sys.executable, "-c", RUN_WITH_AN_EXIT_HANDLER, "info", str(model)], capture_output=True, text=True, timeout=300, env=env)
        for model in (tiny_model_dir, tmp_path / "absent")
    )
    assert (good.returncode, bad.returncode) == (0, 2), good.stderr + bad.stderr
    assert good.stdout.startswith("started") and bad.stdout.startswith("started")
    assert "lstm_dim" in good.stdout and "parameters" in good.stdout
    assert "absent: weights not found" in plain(bad.stderr)
    teardown = world_size == "1"
    assert ("teardown ran" in good.stdout, "teardown ran" in bad.stdout) == (teardown, teardown)


def test_exit_status_follows_system_exit():
    assert [exit_status(code) for code in (None, 0, 3, 130)] == [0, 0, 3, 130]
    assert exit_status("a message") == 1


def test_a_mix_typed_on_the_command_line_is_a_layer_index_only_when_it_reads_as_an_integer():
    assert [parse_mix(text) for text in ("2", "-1", "average", "top", "--1", "1.5")] == [2, -1, "average", "top", "--1", "1.5"]


def _over_inputs_cases(model: Path, text: Path, extra: Path) -> Dict[str, Tuple[List[str], Path]]:
    """Each command with an output that would replace one of its inputs: (argv, that input)."""
    query = ["--word", "bank", "--sentence", "The bank ."]
    return {
        "dump over its text": (["dump", str(model), str(text), str(text), "--top"], text),
        "dump into the model": (["dump", str(model), str(text), str(model / "weights.npz"), "--top"], model / "weights.npz"),
        "evaluate over its text": (["evaluate", str(model), str(text), "--output", str(text)], text),
        "evaluate into the model": (["evaluate", str(model), str(text), "--output", str(model / "config.json")], model / "config.json"),
        "probe over its data": (["probe", str(model), str(text), "--output", str(text)], text),
        "probe over its eval data": (["probe", str(model), str(text), "--eval", str(extra), "--output", str(extra)], extra),
        "neighbors over its corpus": (["neighbors", str(model), str(text), *query, "--json", str(text)], text),
        "report into the model": (["report", str(model), "-o", str(model / "weights.npz")], model / "weights.npz"),
        "report over its corpus": (["report", str(model), "-o", str(text), "--corpus", str(text)], text),
        "plot curves over its log": (["plot", "curves", str(extra), "-o", str(extra)], extra),
        "plot probes over its report": (["plot", "probes", str(extra), "-o", str(extra)], extra),
        "plot mix into its pipeline": (["plot", "mix", str(model), "-o", str(model / "config.json")], model / "config.json"),
        "plot senses over its corpus": (["plot", "senses", str(model), str(text), "--word", "bank", "-o", str(text)], text),
    }


@pytest.mark.parametrize("case", list(_over_inputs_cases(Path("m"), Path("t"), Path("e"))))
def test_an_output_that_would_replace_an_input_is_refused_and_the_input_kept(case, tiny_model_dir, tmp_path):
    model = tmp_path / "bilm"
    shutil.copytree(tiny_model_dir, model)
    text, extra = tmp_path / "text.txt", tmp_path / "extra.json"
    text.write_text("The bank .\n", encoding="utf-8")
    extra.write_text("{}\n", encoding="utf-8")
    argv, kept = _over_inputs_cases(model, text, extra)[case]
    before = kept.read_bytes()
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "which this command reads; give another output path" in plain(result.output)
    assert kept.read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bilm", "extra.json", "text.txt"]


@pytest.mark.parametrize("option, value, message", [("--name", "a/b", "letters, digits and underscores only"), ("--version", "", "is not a version number")])
def test_a_package_name_or_version_spacy_package_would_refuse_is_refused_first(option, value, message, tiny_model_dir, tmp_path):
    result = runner.invoke(app, ["assemble", str(tiny_model_dir), str(tmp_path / "out"), option, value])
    assert result.exit_code == 2 and message in plain(result.output)
    assert not (tmp_path / "out").exists()
