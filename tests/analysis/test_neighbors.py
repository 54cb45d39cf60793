"""Nearest uses in context over a corpus index, and the context-free nearest words."""

import json
from dataclasses import replace
from pathlib import Path

import numpy
import pytest
from spacy.tokens import DocBin
from typer.testing import CliRunner

from elmo_testing import fill_the_disk_before_renames, kept_after_a_failed_write, plain, random_bilm, write_toy_text
from spacy_elmo.analysis.neighbors import (
    DOC,
    POSITION,
    TOKENS,
    WORD,
    IndexWriter,
    count_corpus,
    default_index_dir,
    embed_query,
    layer_file,
    load_index,
    nearest_uses,
    nearest_words,
    open_index,
    resolve_layer,
    top_k_cosine,
)
from spacy_elmo.analysis.vectors import elmo_pipeline, iter_docs, unit_rows
from spacy_elmo.cli import app
from spacy_elmo.io import save_model

runner = CliRunner()
QUERY = "My sister likes the bank ."


@pytest.fixture(scope="module")
def nlp(tiny_model_dir):
    return elmo_pipeline(tiny_model_dir, similarity_hooks=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """150 toy-grammar lines (many uses of "the bank"), one of them QUERY, and "Bank" once."""
    path = write_toy_text(tmp_path_factory.mktemp("corpus") / "toy.txt")
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[40:40] = [QUERY, "Bank holidays are long ."]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(nlp, tiny_model_dir, corpus, tmp_path_factory):
    """An index of the top layer (2) of the corpus, built once for the read-only tests."""
    return open_index(nlp, tiny_model_dir, corpus, tmp_path_factory.mktemp("built") / "index", 2, log=lambda line: None)


def open_logged(nlp, model, corpus, directory, layer=2, **kwargs):
    """open_index, and the one line it logged."""
    lines = []
    index = open_index(nlp, model, corpus, directory, layer, log=lines.append, **kwargs)
    assert len(lines) == 1
    return index, lines[0]


def results(index, query_layers):
    """Both columns for QUERY's "bank", as plain data."""
    uses = [vars(use) for use in nearest_uses(index, 2, query_layers[2], 8)]
    return uses, [vars(match) for match in nearest_words(index, query_layers[0], "bank", 8)]


def test_the_query_own_use_comes_first_when_its_sentence_is_in_the_corpus(nlp, built):
    query = embed_query(nlp, QUERY, "bank")
    uses = nearest_uses(built, 2, query.layers[2], k=5)
    first = uses[0]
    assert (first.word, first.sentence, first.position) == ("bank", QUERY, 4)
    assert first.cosine == pytest.approx(1.0, abs=2e-3)
    assert first.marked() == "My sister likes the [bank] ."
    assert all(use.cosine < first.cosine for use in uses[1:])
    assert [use.cosine for use in uses] == sorted((use.cosine for use in uses), reverse=True)


def test_the_index_is_reused_with_identical_results_and_rebuilt_for_a_changed_corpus(nlp, tiny_model_dir, corpus, tmp_path):
    directory = tmp_path / "index"
    query = embed_query(nlp, QUERY, "bank").layers
    first, line = open_logged(nlp, tiny_model_dir, corpus, directory)
    assert line == f"building index {directory}"
    before = results(first, query)
    again, line = open_logged(nlp, tiny_model_dir, corpus, directory)
    assert line.startswith(f"reusing index {directory}")
    assert results(again, query) == before

    changed = tmp_path / "changed.txt"
    changed.write_text(corpus.read_text(encoding="utf-8") + "The bank is closed today .\n", encoding="utf-8")
    rebuilt, line = open_logged(nlp, tiny_model_dir, changed, directory)
    assert line == f"rebuilding index {directory}: the corpus changed"
    assert rebuilt.meta["n_docs"] == first.meta["n_docs"] + 1
    assert rebuilt.sentence(rebuilt.meta["n_docs"] - 1) == "The bank is closed today ."


def test_another_model_or_limit_rebuilds(nlp, tiny_model_dir, corpus, tmp_path):
    directory = tmp_path / "index"
    open_logged(nlp, tiny_model_dir, corpus, directory)
    other_model = tmp_path / "other"
    save_model(random_bilm(seed=1), other_model)
    other_nlp = elmo_pipeline(other_model, similarity_hooks=False)
    index, line = open_logged(other_nlp, other_model, corpus, directory)
    assert line == f"rebuilding index {directory}: the model changed"
    query = embed_query(other_nlp, QUERY, "bank").layers[2]
    assert nearest_uses(index, 2, query, 1)[0].cosine == pytest.approx(1.0, abs=2e-3)  # the other model's vectors
    index, line = open_logged(other_nlp, other_model, corpus, directory, limit=10)
    assert line == f"rebuilding index {directory}: it was built with --limit 0"
    assert index.meta["n_docs"] == 10


def test_other_components_before_the_elmo_one_rebuild(nlp, tiny_model_dir, corpus, tmp_path):
    directory = tmp_path / "index"
    open_logged(nlp, tiny_model_dir, corpus, directory)
    with_sentences = elmo_pipeline(tiny_model_dir, similarity_hooks=False)
    with_sentences.add_pipe("sentencizer", first=True)
    _, line = open_logged(with_sentences, tiny_model_dir, corpus, directory)
    assert line == f"rebuilding index {directory}: the components before the elmo one changed"


def test_a_missing_layer_is_added_to_the_indexed_ones(nlp, tiny_model_dir, corpus, tmp_path):
    directory = tmp_path / "index"
    open_logged(nlp, tiny_model_dir, corpus, directory, layer=2)
    index, line = open_logged(nlp, tiny_model_dir, corpus, directory, layer=1)
    assert line == f"rebuilding index {directory}: layer 1 is not indexed"
    assert sorted(index.layers) == [1, 2] and index.meta["layers"] == [1, 2]
    _, line = open_logged(nlp, tiny_model_dir, corpus, directory, layer=2)
    assert line.startswith("reusing index")


def test_a_damaged_index_is_rebuilt_to_the_same_results(nlp, tiny_model_dir, corpus, tmp_path, built):
    directory = tmp_path / "index"
    open_logged(nlp, tiny_model_dir, corpus, directory)
    layer_path = directory / layer_file(2)
    layer_path.write_bytes(layer_path.read_bytes()[:-100])
    index, line = open_logged(nlp, tiny_model_dir, corpus, directory)
    assert line.startswith(f"rebuilding index {directory}: it is damaged ({layer_path}: ")
    query = embed_query(nlp, QUERY, "bank").layers
    assert results(index, query) == results(built, query)
    (directory / "meta.json").write_text("{not json", encoding="utf-8")
    _, line = open_logged(nlp, tiny_model_dir, corpus, directory)
    assert line.startswith(f"rebuilding index {directory}: it is damaged ({directory / 'meta.json'}: ")


def test_a_folder_holding_other_files_is_refused_before_indexing(nlp, tiny_model_dir, corpus, tmp_path):
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(ValueError, match="not part of a neighbors index.*notes.txt"):
        open_index(nlp, tiny_model_dir, corpus, tmp_path, 2, log=lambda line: None)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]


def test_a_pipeline_whose_elmo_component_drops_its_layers_is_refused_before_indexing(tiny_model_dir, corpus, tmp_path):
    mixed_only = elmo_pipeline(tiny_model_dir, similarity_hooks=False)
    mixed_only.get_pipe("elmo").settings = replace(mixed_only.get_pipe("elmo").settings, keep_layers=False)
    assert mixed_only(QUERY)._.elmo.layers is None  # what the index and the query would read
    with pytest.raises(ValueError, match="the analyses read every layer: give the elmo component keep_layers = true"):
        open_index(mixed_only, tiny_model_dir, corpus, tmp_path / "index", 2, log=lambda line: None)
    with pytest.raises(ValueError, match="keep_layers = true"):
        embed_query(mixed_only, QUERY, "bank")
    assert list(tmp_path.iterdir()) == []  # nothing written


def row_dots(rows, query):
    """(n,) float64: each row's dot product with `query` made unit, row by row."""
    query = query.astype(numpy.float64) / numpy.linalg.norm(query.astype(numpy.float64))
    return (numpy.asarray(rows, dtype=numpy.float64) * query).sum(axis=1)


@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 1000])
@pytest.mark.parametrize("k", [1, 5, 10, 300])
@pytest.mark.parametrize("query_row", [None, 3])
def test_chunked_search_equals_a_naive_full_matrix_top_k(chunk_rows, k, query_row):
    rng = numpy.random.default_rng(0)
    rows = unit_rows(rng.standard_normal((200, 12))).astype(numpy.float16)
    rows[150:160] = rows[3]  # 11 equal rows: among equal scores the earlier row comes first
    query = rng.standard_normal(12).astype(numpy.float32) if query_row is None else rows[query_row].astype(numpy.float32)
    found, scores = top_k_cosine(rows, query, k, chunk_rows)
    naive_scores = row_dots(rows, query)
    naive = numpy.argsort(-naive_scores, kind="stable")[:k]
    numpy.testing.assert_array_equal(found, naive)
    numpy.testing.assert_allclose(scores, naive_scores[naive], rtol=0, atol=1e-6)


def test_chunked_search_over_the_index_memmap_equals_a_naive_top_k(nlp, built):
    vectors = built.layers[2]
    assert isinstance(vectors, numpy.memmap) and len(vectors) > 1000
    query = embed_query(nlp, "A dog finds the water .", "water").layers[2]
    found, scores = top_k_cosine(vectors, query, 25, chunk_rows=97)
    naive_scores = row_dots(vectors, query)
    naive = numpy.argsort(-naive_scores, kind="stable")[:25]
    numpy.testing.assert_array_equal(found, naive)
    numpy.testing.assert_allclose(scores, naive_scores[naive], rtol=0, atol=1e-6)


def test_the_layer0_column_lists_distinct_words_without_the_query_word_as_a_naive_type_computation(nlp, corpus, built):
    type_vectors = {}
    for doc in nlp.get_pipe("elmo").pipe(iter_docs(corpus, nlp)):
        for token in doc:
            vector = doc._.elmo.layers[0, token.i]
            if token.text in type_vectors:
                numpy.testing.assert_allclose(vector, type_vectors[token.text], atol=1e-6)  # context-free
            type_vectors.setdefault(token.text, vector)
    query = embed_query(nlp, QUERY, "bank").layers[0]
    query_unit = query / numpy.linalg.norm(query)
    candidates = [word for word in type_vectors if word.lower() != "bank"]
    stored = {word: unit_rows(type_vectors[word][None])[0].astype(numpy.float16).astype(numpy.float32) for word in candidates}
    cosines = [float(stored[word] @ query_unit) for word in candidates]
    naive = sorted(zip(candidates, cosines), key=lambda pair: -pair[1])[:12]

    words = nearest_words(built, query, "bank", 12)
    assert [match.word for match in words] == [word for word, _ in naive]
    numpy.testing.assert_allclose([match.cosine for match in words], [cosine for _, cosine in naive], atol=1e-6)
    assert len({match.word for match in words}) == 12
    assert {"bank", "Bank"}.isdisjoint(match.word for match in words) and {"bank", "Bank"} <= set(type_vectors)
    corpus_tokens = corpus.read_text(encoding="utf-8").split()
    counts = {word: corpus_tokens.count(word) for word in candidates}
    assert [match.uses for match in words] == [counts[match.word] for match in words]


def test_a_docbin_corpus_is_indexed_without_whitespace_tokens(nlp, tiny_model_dir, tmp_path):
    docs = [nlp.make_doc("The  bank is  near ."), nlp.make_doc("A river bank .")]
    assert sum(token.is_space for token in docs[0]) == 2
    DocBin(docs=docs).to_disk(tmp_path / "docs.spacy")
    index = open_index(nlp, tiny_model_dir, tmp_path / "docs.spacy", tmp_path / "index", 2, log=lambda line: None)
    assert index.meta["n_tokens"] == 9 and index.meta["n_docs"] == 2
    tokens = numpy.load(tmp_path / "index" / TOKENS)
    assert [index.words[w] for w in tokens[:5, WORD]] == ["The", "bank", "is", "near", "."]
    assert tokens[:5, POSITION].tolist() == [0, 2, 3, 5, 6] and tokens[5:, DOC].tolist() == [1, 1, 1, 1]
    query = embed_query(nlp, "The  bank is  near .", "near").layers[2]
    first = nearest_uses(index, 2, query, 1)[0]
    assert (first.doc, first.position, first.marked()) == (0, 5, "The bank is [near] .")
    assert load_index(tmp_path / "index").sentence(0) == "The  bank is  near ."


def test_a_corpus_that_changes_between_the_counting_and_the_indexing_pass_is_an_error(nlp, tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the bank .\nthe river .\n", encoding="utf-8")
    count = count_corpus(path, nlp)
    (tmp_path / "a").mkdir()
    writer = IndexWriter(tmp_path / "a", count, [2], width=12)
    writer.add(nlp("the bank ."))
    with pytest.raises(ValueError, match=r"the corpus changed while it was being indexed \(at doc 2\)"):
        writer.add(nlp("the money ."))
    (tmp_path / "b").mkdir()
    writer = IndexWriter(tmp_path / "b", count, [2], width=12)
    writer.add(nlp("the bank ."))
    with pytest.raises(ValueError, match="the corpus changed while it was being indexed"):
        writer.finish()


def test_an_interrupted_rebuild_leaves_the_previous_index_and_no_partial_folder(nlp, tiny_model_dir, corpus, tmp_path, built, monkeypatch):
    directory = tmp_path / "index"
    open_logged(nlp, tiny_model_dir, corpus, directory)
    opened = []
    real_init, real_add = IndexWriter.__init__, IndexWriter.add

    def init(writer, *args, **kwargs):
        real_init(writer, *args, **kwargs)
        opened.append(writer)

    def add_then_interrupt(writer, doc):
        if writer.n_docs == 2:
            raise KeyboardInterrupt
        real_add(writer, doc)

    monkeypatch.setattr(IndexWriter, "__init__", init)
    monkeypatch.setattr(IndexWriter, "add", add_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        open_index(nlp, tiny_model_dir, corpus, directory, 2, limit=10, log=lambda line: None)
    assert opened[0].sentences.closed and sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("index")) == ["index"]
    monkeypatch.undo()
    index, line = open_logged(nlp, tiny_model_dir, corpus, directory)
    assert line.startswith("reusing index")
    query = embed_query(nlp, QUERY, "bank").layers
    assert results(index, query) == results(built, query)


def test_layers_resolve_from_the_top_and_bad_layers_are_clear_errors():
    assert resolve_layer(-1, 3) == 2 and resolve_layer(-2, 3) == 1 and resolve_layer(1, 3) == 1
    with pytest.raises(ValueError, match=r"layer -3 \(layer 0\) is the context-free layer, whose nearest words are always"):
        resolve_layer(-3, 3)
    with pytest.raises(ValueError, match=r"layer 3 is out of range: the model has layers 0\.\.2"):
        resolve_layer(3, 3)
    with pytest.raises(ValueError, match=r"layer -4 is out of range"):
        resolve_layer(-4, 3)


def test_bad_queries_and_an_empty_corpus_are_clear_errors(nlp, tmp_path):
    with pytest.raises(ValueError, match=r"'piano' is not a token of the sentence \(its tokens: 'My', 'sister'"):
        embed_query(nlp, QUERY, "piano")
    with pytest.raises(ValueError, match=r"'the' occurs 1 time\(s\) in the sentence: --occurrence must be 1\.\.1"):
        embed_query(nlp, QUERY, "the", occurrence=2)
    assert embed_query(nlp, "the bank and the river", "the", occurrence=2).position == 3
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty.txt holds no tokens to index"):
        count_corpus(empty, nlp)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--word", "piano"], "'piano' is not a token of the sentence"),
        (["--layer", "3"], "layer 3 is out of range: the model has layers 0..2"),
        (["--layer", "0"], "layer 0 is the context-free layer"),
        (["--occurrence", "2"], "'bank' occurs 1 time(s) in the sentence"),
        (["-k", "0"], "--top must be at least 1, not 0"),
        (["--batch-tokens", "100"], "batch_tokens (100) must be at least window_size (128): a batch holds at least one window"),
    ],
)
def test_the_cli_rejects_bad_input_with_the_cause(tiny_model_dir, corpus, tmp_path, extra, message):
    arguments = [str(tiny_model_dir), str(corpus), "--word", "bank", "--sentence", QUERY, "--index", str(tmp_path / "index")]
    result = runner.invoke(app, ["neighbors", *arguments, *extra])
    assert result.exit_code == 2, result.output
    assert message in plain(result.output)
    assert not (tmp_path / "index").exists()  # refused before indexing


def test_the_cli_rejects_an_empty_corpus(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    arguments = [str(tiny_model_dir), str(empty), "--word", "bank", "--sentence", QUERY, "--index", str(tmp_path / "index")]
    result = runner.invoke(app, ["neighbors", *arguments])
    assert result.exit_code == 2
    assert "empty.txt holds no tokens to index" in plain(result.output)


def test_the_cli_prints_both_tables_and_reuses_its_default_index(tiny_model_dir, corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    expected_index = default_index_dir(tiny_model_dir, None, corpus, 0)
    assert expected_index.parent == tmp_path / "cache" / "spacy_elmo" / "neighbors"
    query = ["--word", "bank", "--sentence", QUERY, "-k", "4"]
    arguments = ["neighbors", str(tiny_model_dir), str(corpus), *query, "--json", str(tmp_path / "r.json")]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    output = result.output
    assert f"building index {expected_index}" in output and (expected_index / "meta.json").is_file()
    uses_table = output.split("layer 2: nearest uses in context\n")[1].split("\n\n")[0].splitlines()
    words_table = output.split("layer 0 (context-free): nearest words\n")[1].split("\n\n")[0].splitlines()
    assert uses_table[0].split() == ["#", "cosine", "word", "sentence"] and len(uses_table) == 5
    assert uses_table[1].split()[:3] == ["1", "1.000", "bank"] and uses_table[1].endswith("My sister likes the [bank] .")
    assert words_table[0].split() == ["#", "cosine", "word", "uses"] and len(words_table) == 5
    results = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert [row.split()[2] for row in words_table[1:]] == [match["word"] for match in results["words"]]
    assert "bank" not in [match["word"] for match in results["words"]]
    assert results["query"] == {"word": "bank", "sentence": QUERY, "position": 4, "layer": 2}
    assert results["uses"][0]["sentence"] == QUERY and results["uses"][0]["marked"] == "My sister likes the [bank] ."

    again = runner.invoke(app, arguments[:-2] + ["--layer", "2"])
    assert again.exit_code == 0, again.output
    assert f"reusing index {expected_index}" in again.output
    assert tables(again.output) == tables(output)
    before = (tmp_path / "r.json").read_text(encoding="utf-8")
    fill_the_disk_before_renames(monkeypatch)
    failed = runner.invoke(app, arguments)
    assert failed.exit_code == 2 and "could not be written (No space left on device)" in plain(failed.output)
    assert kept_after_a_failed_write(tmp_path / "r.json", before)


def tables(output: str) -> str:
    """The two tables of a neighbors run."""
    return output[output.index("layer 2: nearest uses") :].split("\n-> ")[0].rstrip()
