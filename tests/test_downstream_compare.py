"""scripts/downstream.py's comparison: which runs `evaluate` pairs, when it scores a model
again, and the relative error reduction, on hand-made run folders (no training)."""

import importlib.util
import json
import statistics
import types
from pathlib import Path

import numpy
import pytest
import spacy
import typer
from typer.testing import CliRunner

import spacy_elmo.pipeline
from elmo_testing import REPO, plain

METRICS = ("tag_acc", "pos_acc", "morph_acc", "dep_uas", "dep_las")


@pytest.fixture(scope="module")
def downstream():
    spec = importlib.util.spec_from_file_location("downstream_script", REPO / "scripts" / "downstream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def evaluations(downstream, monkeypatch):
    """`spacy evaluate` replaced by a stub that scores each model with the accuracy named in
    its folder's `accuracy` file; returns the list of models it was called on."""
    called = []

    def run(command, check):
        model = command[command.index("evaluate") + 1]
        output = command[command.index("--output") + 1]
        accuracy = float(open(f"{model}/accuracy").read())
        with open(output, "w") as handle:
            json.dump({**dict.fromkeys(METRICS, accuracy), "speed": 1000.0}, handle)
        called.append(model)

    monkeypatch.setattr(downstream, "subprocess", types.SimpleNamespace(run=run))
    monkeypatch.setattr(spacy, "load", lambda path: None)
    monkeypatch.setattr(spacy_elmo.pipeline, "learned_mixes", lambda nlp: [])
    return called


def make_run(folder, seed, accuracy, max_steps=2500, train="train-a", inputs=True, overrides=None, bilm=None):
    run_dir = folder / f"seed{seed}"
    (run_dir / "model-best").mkdir(parents=True)
    (run_dir / "model-best" / "accuracy").write_text(str(accuracy))
    record = {"seed": seed, "max_steps": max_steps, "train_seconds": 10.0, "peak_rss_mb": 100.0, "epochs": []}
    if inputs:
        record["inputs"] = {"config": "c", "seed": seed, "max_steps": max_steps, "train": train, "dev": "dev-a"}
        if bilm:
            record["inputs"]["bilm"] = bilm
        if overrides:
            record["inputs"]["overrides"] = overrides
    (run_dir / "run.json").write_text(json.dumps(record))


def evaluate(downstream, output_dir, test_path):
    output = output_dir / "metrics.json"
    table = output_dir / "metrics.md"
    result = CliRunner().invoke(downstream.app, ["evaluate", str(output_dir), str(test_path), "--output", str(output), "--table", str(table)])
    return result, (json.loads(output.read_text()) if result.exit_code == 0 else None)


@pytest.fixture
def test_set(tmp_path):
    path = tmp_path / "test.spacy"
    path.write_bytes(b"test set one")
    return path


def test_relative_error_reduction_is_the_share_of_the_baseline_error_removed(downstream):
    assert downstream.relative_error_reduction(0.90, 0.95) == pytest.approx(0.5)
    assert downstream.relative_error_reduction(0.90, 0.85) == pytest.approx(-0.5)
    assert downstream.relative_error_reduction(0.80, 0.80) == 0.0
    assert downstream.relative_error_reduction(1.0, 0.99) is None


def test_summary_gives_means_sds_and_the_reduction_of_the_means(downstream):
    def run(seed, accuracy):
        return {"seed": seed, **dict.fromkeys(METRICS, accuracy), "train_seconds": 1.0, "words_per_second": 1.0, "peak_rss_mb": 1.0, "epochs": []}

    arms = {"base": [run(0, 0.90), run(1, 0.92)], "elmo": [run(0, 0.95), run(1, 0.93)]}
    summary = downstream.summarize(arms)
    assert summary["base"]["tag_acc"]["mean"] == pytest.approx(0.91)
    assert summary["elmo"]["tag_acc"]["sd"] == pytest.approx(statistics.stdev([0.95, 0.93]))
    assert summary["relative_error_reduction"]["dep_las"] == pytest.approx((0.09 - 0.06) / 0.09)
    perfect = downstream.summarize({"base": [run(0, 1.0)], "elmo": [run(0, 0.99)]})
    assert "n/a" in downstream.summary_table(perfect, {"base": 1, "elmo": 1})


def test_paired_comparison_gives_each_seeds_gain_over_its_own_base_run(downstream):
    def run(seed, accuracy):
        return {"seed": seed, **dict.fromkeys(METRICS, accuracy), "train_seconds": 1.0, "words_per_second": 1.0, "peak_rss_mb": 1.0, "epochs": []}

    # seeds listed in another order in each arm: pairs go by seed, not by position
    arms = {"base": [run(0, 0.90), run(1, 0.80), run(2, 1.0)], "elmo": [run(2, 0.99), run(1, 0.85), run(0, 0.92)]}
    paired = downstream.summarize(arms)["paired"]["tag_acc"]
    gains = [-0.01, 0.05, 0.02]
    assert paired["mean"] == pytest.approx(statistics.fmean(gains))
    assert paired["se"] == pytest.approx(statistics.stdev(gains) / 3**0.5)
    assert (paired["min"], paired["max"]) == (pytest.approx(-0.01), pytest.approx(0.05))
    assert (paired["seeds_ahead"], paired["seeds"]) == (2, 3)
    assert paired["reduction_by_seed"] == [None, pytest.approx(0.25), pytest.approx(0.2)]
    table = downstream.summary_table(downstream.summarize(arms), {"base": 3, "elmo": 3})
    assert "| `tag_acc` | +2.00 ± 1.73 | -1.00, +5.00 | 2 of 3 | +20.0% to +25.0% |" in table


def test_evaluate_compares_only_seeds_whose_arms_share_budget_and_data(downstream, evaluations, tmp_path, test_set):
    make_run(tmp_path / "base", 0, 0.90)
    make_run(tmp_path / "elmo", 0, 0.95)
    make_run(tmp_path / "base", 1, 0.90, train="train-b")  # retrained on other data for another arm
    make_run(tmp_path / "elmo", 1, 0.99)
    make_run(tmp_path / "base", 2, 0.90)
    make_run(tmp_path / "elmo", 2, 0.99, inputs=False)  # interrupted: train never recorded its inputs
    make_run(tmp_path / "base", 3, 0.90)
    make_run(tmp_path / "elmo", 3, 0.99, overrides={"components.tok2vec.model.encode.width": 192})

    result, metrics = evaluate(downstream, tmp_path, test_set)

    assert result.exit_code == 0, result.output
    assert "left out: seeds [1, 3]" in result.output
    assert [run["seed"] for run in metrics["runs"]["elmo"]] == [0]
    assert metrics["summary"]["relative_error_reduction"]["tag_acc"] == pytest.approx(0.5)
    assert len(evaluations) == 2  # only the compared runs are scored


def test_evaluate_compares_seeds_whose_arms_share_the_same_overrides(downstream, evaluations, tmp_path, test_set):
    wider = {"components.tok2vec.model.encode.width": 192}
    for seed in (0, 1):
        make_run(tmp_path / "base", seed, 0.90, overrides=wider)
        make_run(tmp_path / "elmo", seed, 0.95, overrides=dict(wider))

    result, metrics = evaluate(downstream, tmp_path, test_set)

    assert result.exit_code == 0, result.output
    assert [run["seed"] for run in metrics["runs"]["elmo"]] == [0, 1]
    assert "left out" not in result.output


def test_evaluate_refuses_to_average_seeds_of_different_budgets(downstream, evaluations, tmp_path, test_set):
    for seed, steps in ((0, 2500), (1, 5000)):
        make_run(tmp_path / "base", seed, 0.90, max_steps=steps)
        make_run(tmp_path / "elmo", seed, 0.95, max_steps=steps)

    result, _ = evaluate(downstream, tmp_path, test_set)

    assert result.exit_code != 0
    message = plain(result.output)
    assert "the base runs of seeds [0, 1] differ in their step budget (step budgets: [2500, 5000])" in message


def test_evaluate_refuses_to_average_seeds_of_one_arm_trained_with_different_bilms(downstream, evaluations, tmp_path, test_set):
    for seed, bilm in ((0, "bilm-a"), (1, "bilm-a"), (2, "bilm-b")):  # seed 2 trained later with another biLM, same folder
        make_run(tmp_path / "base", seed, 0.90)
        make_run(tmp_path / "elmo", seed, 0.95, bilm=bilm)

    result, _ = evaluate(downstream, tmp_path, test_set)

    assert result.exit_code != 0
    assert "the elmo runs of seeds [0, 1, 2] differ in their biLM" in plain(result.output)
    assert evaluations == []  # refused before scoring anything


def test_evaluate_refuses_a_pipeline_that_lacks_a_compared_metric(downstream, monkeypatch, tmp_path, test_set):
    def tagger_only(command, check):  # spacy evaluate leaves out the scores of missing components
        with open(command[command.index("--output") + 1], "w") as handle:
            json.dump({"tag_acc": 0.9, "pos_acc": 0.9, "morph_acc": None, "speed": 1000.0}, handle)

    monkeypatch.setattr(downstream, "subprocess", types.SimpleNamespace(run=tagger_only))
    make_run(tmp_path / "base", 0, 0.90)
    make_run(tmp_path / "elmo", 0, 0.95)

    result, _ = evaluate(downstream, tmp_path, test_set)

    assert result.exit_code != 0
    assert "spacy evaluate gave no morph_acc, dep_uas, dep_las for" in plain(result.output)


def test_evaluate_scores_again_only_for_another_test_set_or_a_newer_model(downstream, evaluations, tmp_path, test_set):
    make_run(tmp_path / "base", 0, 0.90)
    make_run(tmp_path / "elmo", 0, 0.95)
    evaluate(downstream, tmp_path, test_set)
    assert len(evaluations) == 2

    evaluate(downstream, tmp_path, test_set)
    assert len(evaluations) == 2  # the saved scores are this test set's

    test_set.write_bytes(b"test set two")
    (tmp_path / "elmo" / "seed0" / "model-best" / "accuracy").write_text("0.98")
    _, metrics = evaluate(downstream, tmp_path, test_set)
    assert len(evaluations) == 4
    assert metrics["runs"]["elmo"][0]["tag_acc"] == pytest.approx(0.98)


@pytest.fixture
def twin_inputs(tmp_path):
    """Stand-ins for the two configs, the data and the biLM that `train` fingerprints."""
    for name in ("base.cfg", "elmo.cfg", "train.spacy", "dev.spacy"):
        (tmp_path / name).write_text(name)
    (tmp_path / "bilm").mkdir()
    (tmp_path / "bilm" / "weights").write_text("bilm")
    return tmp_path


def train_arguments(folder, *options):
    """`train`'s command line on the stand-ins of `twin_inputs`, seeds 0 and 1."""
    arguments = ["train", str(folder / "base.cfg"), str(folder / "elmo.cfg"), str(folder / "runs"), "--bilm", str(folder / "bilm")]
    return arguments + ["--train", str(folder / "train.spacy"), "--dev", str(folder / "dev.spacy"), "--seeds", "0,1", *options]


def run_dir_of(command):
    """The run folder a `downstream.py run` command line trains into."""
    return Path(command[command.index("run") + 2])


def train(downstream, monkeypatch, folder, *options):
    """`train` two seeds with each run's process replaced by one that writes its run.json;
    returns the runs' command lines."""
    commands = []

    def run(command):
        run_dir = run_dir_of(command)
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"seed": int(command[command.index("--seed") + 1])}))
        commands.append(command)
        return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(downstream, "subprocess", types.SimpleNamespace(run=run))
    result = CliRunner().invoke(downstream.app, train_arguments(folder, *options))
    assert result.exit_code == 0, result.output
    return commands


def test_train_gives_both_arms_the_same_overrides_and_records_them(downstream, monkeypatch, twin_inputs):
    width = "components.tok2vec.model.encode.width=192"
    commands = train(downstream, monkeypatch, twin_inputs, "--set", width, "--set", "components.tagger.label_smoothing=0.1")

    assert len(commands) == 4  # base and elmo, seeds 0 and 1
    for command in commands:
        assert command[command.index("--set") :][:4] == ["--set", width, "--set", "components.tagger.label_smoothing=0.1"]
    for arm in ("base", "elmo"):
        inputs = json.loads((twin_inputs / "runs" / arm / "seed1" / "run.json").read_text())["inputs"]
        assert inputs["overrides"] == {"components.tok2vec.model.encode.width": 192, "components.tagger.label_smoothing": 0.1}

    assert train(downstream, monkeypatch, twin_inputs, "--set", width, "--set", "components.tagger.label_smoothing=0.1") == []
    again = train(downstream, monkeypatch, twin_inputs, "--replace", "--set", "components.tok2vec.model.encode.width=256")
    assert len(again) == 4  # other overrides, replacing asked for: every run is trained again
    without = train(downstream, monkeypatch, twin_inputs, "--replace")
    assert len(without) == 4 and "--set" not in without[0]
    assert "overrides" not in json.loads((twin_inputs / "runs" / "base" / "seed0" / "run.json").read_text())["inputs"]


def test_train_refuses_to_replace_finished_runs_of_other_inputs_before_training_any(downstream, monkeypatch, twin_inputs):
    train(downstream, monkeypatch, twin_inputs, "--seeds", "0")
    (twin_inputs / "bilm" / "weights").write_text("another bilm")  # the same path, other weights
    trained = []
    monkeypatch.setattr(downstream, "subprocess", types.SimpleNamespace(run=lambda command: trained.append(command)))

    result = CliRunner().invoke(downstream.app, train_arguments(twin_inputs))  # seeds 0 and 1

    assert result.exit_code != 0 and trained == []
    message = plain(result.output)  # long paths may be wrapped inside: the words are checked here, the paths below
    assert "(other biLM)" in message and "--elmo-arm of its own" in message and "--replace" in message
    assert (twin_inputs / "runs" / "elmo" / "seed0" / "run.json").is_file()  # untouched
    assert train(downstream, monkeypatch, twin_inputs, "--elmo-arm", "elmo-b") != []  # a folder of its own trains

    runs = twin_inputs / "runs"
    recorded = {arm: json.loads((runs / arm / "seed0" / "run.json").read_text())["inputs"] for arm in ("base", "elmo")}
    planned = [
        ("base", 0, runs / "base" / "seed0", recorded["base"]),  # the same inputs: nothing to replace
        ("elmo", 0, runs / "elmo" / "seed0", {**recorded["elmo"], "bilm": "other", "max_steps": 5000}),
        ("elmo", 1, runs / "elmo" / "seed1", recorded["elmo"]),  # never trained
    ]
    with pytest.raises(typer.BadParameter) as refused:
        downstream.refuse_to_replace(planned)
    assert str(refused.value).startswith(
        f"these runs were finished with other inputs and would be replaced: {runs / 'elmo' / 'seed0'} (other step budget, biLM). "
    )


def test_train_restarts_an_interrupted_run_without_asking(downstream, monkeypatch, twin_inputs):
    interrupted = twin_inputs / "runs" / "base" / "seed0"
    interrupted.mkdir(parents=True)
    (interrupted / "run.json").write_text(json.dumps({"seed": 0}))  # no inputs: train never recorded them

    commands = train(downstream, monkeypatch, twin_inputs, "--seeds", "0")

    assert [run_dir_of(command) for command in commands] == [interrupted, twin_inputs / "runs" / "elmo" / "seed0"]


@pytest.mark.parametrize("record", ["{bad", "[1]", '{"inputs": {}}'])
def test_a_damaged_run_record_is_named_in_a_one_line_error(downstream, evaluations, monkeypatch, twin_inputs, test_set, record):
    damaged = twin_inputs / "runs" / "base" / "seed0"
    damaged.mkdir(parents=True)
    (damaged / "run.json").write_text(record)
    for arguments in (train_arguments(twin_inputs), ["evaluate", str(twin_inputs / "runs"), str(test_set)]):
        result = CliRunner().invoke(downstream.app, arguments)
        assert result.exit_code == 2, result.output
        assert "run.json: not a run record" in plain(result.output) and "remove the run's folder" in plain(result.output)
    assert (damaged / "run.json").read_text() == record


@pytest.mark.parametrize("item", ["components.tok2vec.model.encode.width", "=192", "components.elmo.layer_cache=never"])
def test_train_refuses_an_override_that_is_not_key_equals_json(downstream, twin_inputs, item):
    result = CliRunner().invoke(downstream.app, train_arguments(twin_inputs, "--set", item))

    assert result.exit_code != 0
    assert "--set takes KEY=VALUE with VALUE in JSON" in plain(result.output) and not (twin_inputs / "runs").exists()


def test_train_arms_trains_one_arm_whose_runs_a_full_train_then_skips(downstream, monkeypatch, twin_inputs):
    elmo_only = train(downstream, monkeypatch, twin_inputs, "--arms", "elmo")

    assert [run_dir_of(command).parent.name for command in elmo_only] == ["elmo", "elmo"]
    assert not (twin_inputs / "runs" / "base").exists()
    rest = train(downstream, monkeypatch, twin_inputs)
    assert [run_dir_of(command).parent.name for command in rest] == ["base", "base"]
    assert train(downstream, monkeypatch, twin_inputs, "--arms", "base,elmo") == []


@pytest.mark.parametrize("arms", ["", "elmo,tagger", "Base"])
def test_train_refuses_arms_other_than_base_and_elmo(downstream, twin_inputs, arms):
    result = CliRunner().invoke(downstream.app, train_arguments(twin_inputs, "--arms", arms))

    assert result.exit_code != 0
    assert "--arms must list 'base', 'elmo' or both" in plain(result.output) and not (twin_inputs / "runs").exists()


def test_precomputed_layers_go_to_the_elmo_arm_only_and_pair_with_the_base_runs(downstream, monkeypatch, twin_inputs):
    """`--elmo-layers` is an input of the ELMo arm alone (like its biLM): the base runs
    trained without it are kept and still pair with the ELMo runs trained with it."""
    train(downstream, monkeypatch, twin_inputs, "--arms", "base")
    (twin_inputs / "layers.hdf5").write_text("layers")
    commands = train(downstream, monkeypatch, twin_inputs, "--elmo-arm", "crossfit", "--elmo-layers", str(twin_inputs / "layers.hdf5"))
    assert len(commands) == 2 and all(run_dir_of(command).parent.name == "crossfit" for command in commands)
    assert all(command[command.index("--elmo-layers") + 1] == str(twin_inputs / "layers.hdf5") for command in commands)
    base = downstream.finished_runs(twin_inputs / "runs" / "base")
    elmo = downstream.finished_runs(twin_inputs / "runs" / "crossfit")
    assert "elmo_layers" not in base[0]["inputs"] and elmo[0]["inputs"]["elmo_layers"] == [downstream.fingerprint(twin_inputs / "layers.hdf5")]
    assert downstream.paired_seeds(base, elmo, {"base": "base", "elmo": "crossfit"}) == [0, 1]

    (twin_inputs / "layers.hdf5").write_text("other layers")
    result = CliRunner().invoke(downstream.app, train_arguments(twin_inputs, "--elmo-arm", "crossfit", "--elmo-layers", str(twin_inputs / "layers.hdf5")))
    assert result.exit_code != 0 and "other precomputed layers" in result.output


def test_precomputed_layers_reach_the_elmo_components_initialization(downstream, tmp_path):
    values = downstream.overrides(0, 10, tmp_path / "t", tmp_path / "d", tmp_path / "b", [tmp_path / "a.hdf5", tmp_path / "b.hdf5"], tmp_path / "e")
    paths = [str(tmp_path / "a.hdf5"), str(tmp_path / "b.hdf5")]
    assert values["initialize.after_init"] == {"@callbacks": "spacy-elmo.precomputed_layers.v1", "paths": paths}
    assert "initialize.after_init" not in downstream.overrides(0, 10, tmp_path / "t", tmp_path / "d", None, [], tmp_path / "e")


def test_sample_rest_splits_a_docbin_into_two_halves(downstream, tmp_path):
    from spacy.tokens import Doc, DocBin

    nlp = spacy.blank("en")
    DocBin(docs=[Doc(nlp.vocab, words=[f"w{i}", "runs", "."]) for i in range(10)]).to_disk(tmp_path / "train.spacy")
    arguments = ["sample", str(tmp_path / "train.spacy"), str(tmp_path / "a.spacy"), "--docs", "4", "--seed", "3", "--rest", str(tmp_path / "b.spacy")]
    result = CliRunner().invoke(downstream.app, arguments)
    assert result.exit_code == 0, result.output
    halves = [[int(doc[0].text[1:]) for doc in DocBin().from_disk(tmp_path / f"{half}.spacy").get_docs(nlp.vocab)] for half in "ab"]
    assert len(halves[0]) == 4 and sorted(halves[0] + halves[1]) == list(range(10))
    assert all(half == sorted(half) for half in halves)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["sample", "train.spacy", "train.spacy", "--docs", "2"], "train.spacy: the output is train.spacy, which this command reads"),
        (["sample", "train.spacy", "a.spacy", "--docs", "2", "--rest", "a.spacy"], "a.spacy: the output is a.spacy, which this command reads"),
        (["sample", "junk.spacy", "a.spacy", "--docs", "2"], "junk.spacy: not a DocBin (.spacy) file"),
        (["sample", "train.spacy", "folder", "--docs", "2"], "folder: could not be written"),
        (["lines", "train.spacy", "train.spacy"], "train.spacy: the output is train.spacy, which this command reads"),
        (["lines", "junk.spacy", "a.txt"], "junk.spacy: not a DocBin (.spacy) file"),
        (["lines", "train.spacy", "a.txt", "--lang", "zz"], "--lang 'zz': spaCy cannot make this language's tokenizer here"),
        (["lines", "train.spacy", "folder"], "folder: could not be written"),
    ],
)
def test_sample_and_lines_refuse_bad_files_in_one_line_and_keep_their_input(downstream, tmp_path, monkeypatch, arguments, message):
    from spacy.tokens import Doc, DocBin

    monkeypatch.chdir(tmp_path)
    DocBin(docs=[Doc(spacy.blank("en").vocab, words=[f"w{i}", "."]) for i in range(4)]).to_disk("train.spacy")
    (tmp_path / "junk.spacy").write_bytes(b"not a docbin")
    (tmp_path / "folder").mkdir()
    before = (tmp_path / "train.spacy").read_bytes()
    result = CliRunner().invoke(downstream.app, arguments)
    assert result.exit_code == 2, result.output
    assert message in plain(result.output)
    assert (tmp_path / "train.spacy").read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder", "junk.spacy", "train.spacy"]


def test_lines_writes_the_tokens_the_elmo_component_reads_in_spacy_train(downstream, tmp_path):
    """spaCy's corpus reader gives the pipeline the doc's text tokenized again (UD's
    "'Akkab" is two tokens to spaCy's English tokenizer); whitespace tokens are left out."""
    from spacy.tokens import Doc, DocBin

    nlp = spacy.blank("en")
    docs = [
        Doc(nlp.vocab, words=["Hamid", "'Akkab", "came", "."], spaces=[True, True, False, False]),
        Doc(nlp.vocab, words=["Two", " ", "spaces", "!"], spaces=[True, False, False, False]),
    ]
    DocBin(docs=docs).to_disk(tmp_path / "docs.spacy")
    result = CliRunner().invoke(downstream.app, ["lines", str(tmp_path / "docs.spacy"), str(tmp_path / "docs.txt")])
    assert result.exit_code == 0, result.output
    expected = [" ".join(t.text for t in nlp.make_doc(doc.text) if not t.is_space) for doc in docs]
    assert expected[0] != "Hamid 'Akkab came ."  # the reader's tokens, not the DocBin's
    assert (tmp_path / "docs.txt").read_text(encoding="utf-8").splitlines() == expected
    assert expected[1] == "Two spaces !"


def fake_vectors(folder, rows=3):
    """A folder laid out as a pipeline with vectors (only what `train` checks and fingerprints)."""
    (folder / "vocab").mkdir(parents=True)
    with (folder / "vocab" / "vectors").open("wb") as table:
        numpy.save(table, numpy.ones((rows, 4), dtype=numpy.float32))
    return folder


@pytest.mark.parametrize(
    "config, switch",
    [
        ("ud-base.cfg", "components.tok2vec.model.embed.include_static_vectors"),
        ("ud-elmo.cfg", "components.tok2vec.model.embed.features.include_static_vectors"),
        ("ud-elmo-layers.cfg", "components.tok2vec.model.embed.features.include_static_vectors"),
        ("ud-elmo-io.cfg", "components.tok2vec.model.embed.features.include_static_vectors"),
    ],
)
def test_static_vectors_switch_on_the_embed_each_twin_config_has(downstream, tmp_path, config, switch):
    vectors = fake_vectors(tmp_path / "vectors")
    assert downstream.static_vector_overrides(REPO / "configs" / config, vectors) == {"paths.vectors": str(vectors), switch: True}


def test_static_vectors_go_to_both_arms_and_pair_only_with_runs_trained_on_them(downstream, monkeypatch, twin_inputs):
    for arm, config in (("base", "ud-base.cfg"), ("elmo", "ud-elmo-layers.cfg")):
        (twin_inputs / f"{arm}.cfg").write_text((REPO / "configs" / config).read_text())
    vectors = fake_vectors(twin_inputs / "vectors")
    train(downstream, monkeypatch, twin_inputs, "--arms", "base")  # the plain base, then the ELMo arm with vectors
    commands = train(downstream, monkeypatch, twin_inputs, "--arms", "elmo", "--elmo-arm", "elmo-vectors", "--static-vectors", str(vectors))
    assert len(commands) == 2 and all(command[command.index("--static-vectors") + 1] == str(vectors) for command in commands)
    base = downstream.finished_runs(twin_inputs / "runs" / "base")
    elmo = downstream.finished_runs(twin_inputs / "runs" / "elmo-vectors")
    assert "static_vectors" not in base[0]["inputs"] and elmo[0]["inputs"]["static_vectors"] == downstream.fingerprint(vectors)
    assert downstream.paired_seeds(base, elmo, {"base": "base", "elmo": "elmo-vectors"}) == []  # a shared input, unlike the biLM

    result = CliRunner().invoke(downstream.app, train_arguments(twin_inputs, "--elmo-arm", "elmo-vectors", "--static-vectors", str(vectors)))
    assert result.exit_code != 0 and "(other static vectors)" in plain(result.output)

    both = train(downstream, monkeypatch, twin_inputs, "--replace", "--elmo-arm", "elmo-vectors", "--static-vectors", str(vectors))
    assert [run_dir_of(command).parent.name for command in both] == ["base", "base"]  # the ELMo runs had them already
    assert "--static-vectors" in both[0]
    base = downstream.finished_runs(twin_inputs / "runs" / "base")
    assert downstream.paired_seeds(base, elmo, {"base": "base", "elmo": "elmo-vectors"}) == [0, 1]


def test_train_refuses_static_vectors_it_cannot_give_before_training_any(downstream, monkeypatch, twin_inputs):
    (twin_inputs / "elmo.cfg").write_text((REPO / "configs" / "ud-elmo.cfg").read_text())
    trained = []
    monkeypatch.setattr(downstream, "subprocess", types.SimpleNamespace(run=lambda command: trained.append(command)))
    (twin_inputs / "not-vectors").mkdir()
    result = CliRunner().invoke(downstream.app, train_arguments(twin_inputs, "--static-vectors", str(twin_inputs / "not-vectors")))
    assert result.exit_code != 0 and "is not a pipeline with vectors: make one with" in plain(result.output)
    empty = fake_vectors(twin_inputs / "empty-vectors", rows=0)
    result = CliRunner().invoke(downstream.app, train_arguments(twin_inputs, "--static-vectors", str(empty)))
    assert result.exit_code != 0 and "holds no vectors (a table of 0 rows)" in plain(result.output)

    vectors = fake_vectors(twin_inputs / "vectors")
    (twin_inputs / "base.cfg").write_text('[nlp]\nlang = "en"\n')
    result = CliRunner().invoke(downstream.app, train_arguments(twin_inputs, "--static-vectors", str(vectors)))
    assert result.exit_code != 0 and "has no embed that reads static vectors" in plain(result.output)
    assert trained == [] and not (twin_inputs / "runs").exists()
