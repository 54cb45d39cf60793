"""The `downstream` project workflow end to end on a toy slice of UD English EWT and a tiny
biLM: both twins trained for two seeds, evaluated, compared; then the ELMo arm's pipeline
packaged, installed into a fresh venv and predicting as before."""

import json
import subprocess
import sys

import pytest
import spacy

from elmo_testing import REPO, SHARED, copy_project, install_in_fresh_venv, project_run

UD = SHARED / "data" / "ud-english-ewt"
PREDICT = (
    "import json, spacy, sys; nlp = spacy.load('en_ud_elmo'); print(json.dumps([[t.tag_, t.pos_, str(t.morph), t.dep_, t.head.i] for t in nlp(sys.argv[1])]))"
)


def toy_treebank(folder, sentences=(60, 15, 15)):
    """The first sentences of each UD EWT split."""
    if not (UD / "en_ewt-ud-train.conllu").is_file():
        pytest.skip(f"UD English EWT not found at {UD} (expected ../shared beside the repository)")
    folder.mkdir()
    for split, count in zip(("train", "dev", "test"), sentences):
        blocks = (UD / f"en_ewt-ud-{split}.conllu").read_text(encoding="utf-8").split("\n\n")[:count]
        (folder / f"en_ewt-ud-{split}.conllu").write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return folder


def twin_variables(tmp_path, bilm, steps, seeds):
    """Project variables for the twins on a toy treebank in tmp_path/ud."""
    ud_dir = toy_treebank(tmp_path / "ud")
    return ["--vars.ud_dir", str(ud_dir), "--vars.bilm", str(bilm), "--vars.downstream_steps", str(steps), "--vars.downstream_seeds", seeds]


def test_downstream_workflow_on_a_toy_treebank(tmp_path, tiny_model_dir):
    project = copy_project(tmp_path / "project")
    variables = twin_variables(tmp_path, tiny_model_dir, steps=30, seeds="0,1")
    output = project_run(project, "downstream", *variables)

    result = json.loads((project / "metrics" / "downstream.json").read_text())
    assert sorted(result["runs"]) == ["base", "elmo"]
    for runs in result["runs"].values():
        assert [run["seed"] for run in runs] == [0, 1]
        for run in runs:
            assert all(0.0 <= run[metric] <= 1.0 for metric in ("tag_acc", "pos_acc", "morph_acc", "dep_uas", "dep_las"))
            assert run["train_seconds"] > 0 and run["words_per_second"] > 0 and run["peak_rss_mb"] > 0
            assert run["epochs"] and run["epochs"][0]["epoch"] == 0 and run["epochs"][0]["steps"] >= 1
    summary = result["summary"]
    assert set(summary["relative_error_reduction"]) == {"tag_acc", "pos_acc", "morph_acc", "dep_uas", "dep_las"}
    for seed in ("seed0", "seed1"):
        (mix,) = result["mixes"][seed]
        assert mix["component"] == "tok2vec" and len(mix["weights"]) == 3 and abs(sum(mix["weights"]) - 1) < 1e-5
    assert output.count("tok2vec: layer weights [") == 2
    table = (project / "metrics" / "downstream.md").read_text()
    assert "| `dep_las` |" in table and "relative error reduction" in table

    # a second run trains nothing again
    again = project_run(project, "downstream-train", *variables, "--force")
    assert again.count("done before, skipped") == 4

    model = project / "training" / "downstream" / "elmo" / "seed0" / "model-best"
    nlp = spacy.load(model)
    assert nlp.pipe_names == ["elmo", "tok2vec", "tagger", "morphologizer", "parser"]
    (tmp_path / "packages").mkdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy",
            "package",
            str(model),
            str(tmp_path / "packages"),
            "--name",
            "ud_elmo",
            "--version",
            "0.0.1",
            "--build",
            "sdist",
            "--force",
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    sdist = next((tmp_path / "packages").glob("en_ud_elmo-0.0.1/dist/en_ud_elmo-0.0.1.tar.gz"))
    python = install_in_fresh_venv(tmp_path / "venv", sdist)
    text = "The bank approved the loan for the house."
    installed = subprocess.run([str(python), "-c", PREDICT, text], capture_output=True, text=True, check=True, timeout=300, cwd=tmp_path)
    assert json.loads(installed.stdout) == [[t.tag_, t.pos_, str(t.morph), t.dep_, t.head.i] for t in nlp(text)]


def test_downstream_trains_the_input_and_output_twin_with_a_mix_per_component(tmp_path, tiny_model_dir):
    project = copy_project(tmp_path / "project")
    io_arm = ["--vars.elmo_config", "configs/ud-elmo-io.cfg", "--vars.elmo_arm", "elmo-io"]
    variables = twin_variables(tmp_path, tiny_model_dir, steps=10, seeds="0") + io_arm
    output = project_run(project, "downstream", *variables)

    result = json.loads((project / "metrics" / "downstream.json").read_text())
    assert [run["seed"] for run in result["runs"]["elmo"]] == [0]
    assert [mix["component"] for mix in result["mixes"]["seed0"]] == ["tok2vec", "tagger", "morphologizer", "parser"]
    assert "parser: layer weights [" in output
    nlp = spacy.load(project / "training" / "downstream" / "elmo-io" / "seed0" / "model-best")
    doc = nlp("The cat sat on the mat .")
    assert [token.tag_ for token in doc] and doc.has_annotation("DEP")


def test_adapt_continues_the_bilm_on_the_task_text_with_its_vocabulary(tmp_path, toy_corpus):
    """`adapt`: the task's training text, prepared with the model's own vocabulary, trains
    the biLM further; its perplexity on held-out task text falls."""
    from thinc.api import Config

    from elmo_testing import tiny_pretrain_overrides
    from spacy_elmo.training.config import load_config
    from spacy_elmo.training.trainer import pretrain

    project = copy_project(tmp_path / "project")
    config = load_config(REPO / "configs" / "pretrain-demo.cfg", tiny_pretrain_overrides(toy_corpus, max_steps=10))
    pretrain(config, project / "training", progress_bar=False)
    overrides = {**tiny_pretrain_overrides("corpus/adapt", max_steps=40), "training.max_epochs": 4, "schedule.warmup_steps": 0}
    Config().from_disk(REPO / "configs" / "pretrain-adapt.cfg", overrides=overrides).to_disk(project / "configs" / "tiny-adapt.cfg")
    variables = ["--vars.ud_dir", str(toy_treebank(tmp_path / "ud", sentences=(200, 5, 5))), "--vars.adapt_config", "configs/tiny-adapt.cfg"]
    project_run(project, "ud-convert", *variables)
    project_run(project, "adapt", *variables)
    assert (project / "corpus" / "adapt" / "vocab.txt").read_text() == (project / "training" / "model-best" / "vocab.txt").read_text()
    before = json.loads((project / "metrics" / "adapt-before.json").read_text())
    after = json.loads((project / "metrics" / "adapt-after.json").read_text())
    assert before["sentences"] == after["sentences"] > 0
    assert after["mean"] < before["mean"]


def run_sample(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "downstream.py"), "sample", *args], capture_output=True, text=True)


def test_sample_draws_a_seeded_share_of_the_training_docs_with_their_annotations(tmp_path):
    """`sample`: DOCS docs of the DocBin, a different draw per seed, the same draw for the same
    seed, in their original order and with tags, parses and morphology intact."""
    from spacy.tokens import Doc, DocBin

    nlp = spacy.blank("en")
    annotations = dict(tags=["NN", "VBZ", "."], pos=["NOUN", "VERB", "PUNCT"], heads=[1, 1, 1], deps=["nsubj", "ROOT", "punct"])
    originals = [Doc(nlp.vocab, words=[f"w{i}", "runs", "."], morphs=[f"Number=Sing|Index={i}", "", ""], **annotations) for i in range(40)]
    DocBin(docs=originals).to_disk(tmp_path / "train.spacy")

    def draw(name: str, seed: str):
        result = run_sample(str(tmp_path / "train.spacy"), str(tmp_path / name), "--docs", "10", "--seed", seed)
        assert result.returncode == 0, result.stderr
        assert "10 of 40 docs (30 words)" in result.stdout
        return list(DocBin().from_disk(tmp_path / name).get_docs(nlp.vocab))

    first, again, other = draw("a.spacy", "0"), draw("b.spacy", "0"), draw("c.spacy", "1")
    indices = [int(doc[0].text[1:]) for doc in first]
    assert len(indices) == 10 and indices == sorted(set(indices))
    assert indices == [int(doc[0].text[1:]) for doc in again]
    assert indices != [int(doc[0].text[1:]) for doc in other]
    assert indices != list(range(10))
    for doc in first:
        original = originals[int(doc[0].text[1:])]
        assert doc.to_json() == original.to_json()


def test_sample_refuses_more_docs_than_there_are(tmp_path):
    from spacy.tokens import Doc, DocBin

    nlp = spacy.blank("en")
    DocBin(docs=[Doc(nlp.vocab, words=["a", "b"]) for _ in range(3)]).to_disk(tmp_path / "train.spacy")
    result = run_sample(str(tmp_path / "train.spacy"), str(tmp_path / "out.spacy"), "--docs", "4")
    assert result.returncode != 0 and "--docs 4 is more than the 3 docs" in result.stdout + result.stderr
    assert not (tmp_path / "out.spacy").exists()


def test_ud_sample_feeds_the_twins_in_a_folder_of_their_own(tmp_path, tiny_model_dir):
    """`ud-sample` draws from the converted EWT training split, and `downstream-train` with
    `downstream_train` / `downstream_dir` is given the sample and a folder of its own (checked
    on the command a dry run prints)."""
    from spacy.tokens import DocBin

    project = copy_project(tmp_path / "project")
    sample = "corpus/ud/en_ewt-ud-train-25.spacy"
    variables = ["--vars.ud_dir", str(toy_treebank(tmp_path / "ud")), "--vars.sample_docs", "25", "--vars.bilm", str(tiny_model_dir)]
    project_run(project, "ud-convert", *variables)
    project_run(project, "ud-sample", *variables)
    assert len(DocBin().from_disk(project / sample)) == 25
    dry = project_run(project, "downstream-train", "--dry", *variables, "--vars.downstream_train", sample, "--vars.downstream_dir", "training/downstream-25")
    assert f"training/downstream-25 --bilm {tiny_model_dir}" in dry and f"--train {sample} --dev" in dry


def test_a_run_trains_with_the_overrides_it_is_given(tmp_path):
    """`--set` reaches spaCy's training: the saved pipeline has the overridden width."""
    ud_dir = toy_treebank(tmp_path / "ud", sentences=(20, 5, 5))
    for split in ("train", "dev"):
        convert = [sys.executable, "-m", "spacy", "convert", str(ud_dir / f"en_ewt-ud-{split}.conllu"), str(ud_dir), "--converter", "conllu"]
        subprocess.run(convert, check=True, capture_output=True, timeout=300)
    run_dir = tmp_path / "run"
    command = [sys.executable, str(REPO / "scripts" / "downstream.py"), "run", str(REPO / "configs" / "ud-base.cfg"), str(run_dir)]
    command += ["--seed", "0", "--max-steps", "2", "--train", str(ud_dir / "en_ewt-ud-train.spacy"), "--dev", str(ud_dir / "en_ewt-ud-dev.spacy")]
    subprocess.run([*command, "--set", "components.tok2vec.model.encode.width=32"], check=True, capture_output=True, timeout=600)

    nlp = spacy.load(run_dir / "model-last")
    assert nlp.config["components"]["tok2vec"]["model"]["encode"]["width"] == 32
    assert nlp.get_pipe("tok2vec").model.get_dim("nO") == 32
    assert nlp.get_pipe("tagger").model.get_ref("tok2vec").get_dim("nO") == 32
    assert json.loads((run_dir / "run.json").read_text())["max_steps"] == 2


def test_a_runs_precomputed_layers_reach_the_elmo_component_in_spacy_train(tmp_path, tiny_model_dir):
    """`run --elmo-layers` hands the file to the elmo component's initialization inside
    `spacy train`: a file of another width stops the run with the component's message."""
    import h5py

    ud_dir = toy_treebank(tmp_path / "ud", sentences=(20, 5, 5))
    for split in ("train", "dev"):
        convert = [sys.executable, "-m", "spacy", "convert", str(ud_dir / f"en_ewt-ud-{split}.conllu"), str(ud_dir), "--converter", "conllu"]
        subprocess.run(convert, check=True, capture_output=True, timeout=300)
    with h5py.File(tmp_path / "wide.hdf5", "w") as out:
        out.create_dataset("0", data=[[[0.0] * 999] * 2] * 3)
        out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())[0] = json.dumps({"a b": "0"})
    command = [sys.executable, str(REPO / "scripts" / "downstream.py"), "run", str(REPO / "configs" / "ud-elmo-layers.cfg"), str(tmp_path / "run")]
    command += ["--seed", "0", "--max-steps", "2", "--train", str(ud_dir / "en_ewt-ud-train.spacy"), "--dev", str(ud_dir / "en_ewt-ud-dev.spacy")]
    command += ["--bilm", str(tiny_model_dir), "--elmo-layers", str(tmp_path / "wide.hdf5")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())  # the traceback wraps lines
    assert "holds arrays of shape (3, 2, 999), but the biLM gives 3 layers of width 12" in output


def test_a_run_with_static_vectors_reads_them_beside_the_hash_embeddings(tmp_path, tiny_model_dir):
    """`run --static-vectors` on both twin configs: each saved pipeline holds the vectors of
    the pipeline it was given, and its tok2vec reads them (the ELMo arm in embed.features)."""
    pytest.importorskip("floret")
    import numpy
    from spacy.tokens import DocBin

    ud_dir = toy_treebank(tmp_path / "ud", sentences=(20, 5, 5))
    for split in ("train", "dev"):
        convert = [sys.executable, "-m", "spacy", "convert", str(ud_dir / f"en_ewt-ud-{split}.conllu"), str(ud_dir), "--converter", "conllu"]
        subprocess.run(convert, check=True, capture_output=True, timeout=300)
    docs = DocBin().from_disk(ud_dir / "en_ewt-ud-train.spacy").get_docs(spacy.blank("en").vocab)
    (tmp_path / "text.txt").write_text("\n".join(" ".join(token.text for token in doc) for doc in docs) + "\n", encoding="utf-8")
    vectors = tmp_path / "vectors"
    make = [sys.executable, str(REPO / "scripts" / "static_vectors.py"), str(vectors), str(tmp_path / "text.txt")]
    subprocess.run([*make, "--dim", "8", "--epochs", "1", "--min-count", "1"], check=True, capture_output=True, timeout=300)
    given = spacy.load(vectors).vocab.vectors

    for config, embed, bilm in (("ud-base.cfg", ("embed",), []), ("ud-elmo-layers.cfg", ("embed", "features"), ["--bilm", str(tiny_model_dir)])):
        run_dir = tmp_path / config
        command = [sys.executable, str(REPO / "scripts" / "downstream.py"), "run", str(REPO / "configs" / config), str(run_dir), *bilm]
        command += ["--seed", "0", "--max-steps", "2", "--train", str(ud_dir / "en_ewt-ud-train.spacy"), "--dev", str(ud_dir / "en_ewt-ud-dev.spacy")]
        subprocess.run([*command, "--static-vectors", str(vectors)], check=True, capture_output=True, timeout=600)
        nlp = spacy.load(run_dir / "model-last")
        section = nlp.config["components"]["tok2vec"]["model"]
        for name in embed:
            section = section[name]
        assert section["include_static_vectors"] is True
        assert nlp.vocab.vectors.shape == given.shape and numpy.array_equal(nlp.vocab.vectors.data, given.data)
        assert "static_vectors" in [node.name for node in nlp.get_pipe("tok2vec").model.walk()]
