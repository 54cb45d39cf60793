"""`corpus`: prepare text for biLM pretraining (bilm-tf layout)."""

from pathlib import Path
from typing import Optional

import typer

from ..training.corpus import MAX_DOCUMENT_CHARS, prepare_corpus
from .app import app, clean_errors


@app.command()
def corpus(
    input_path: Path = typer.Argument(..., help=".txt (a document per line), a folder of .txt, .jsonl with 'text', or .spacy"),
    output_dir: Path = typer.Argument(..., help="Where to write train/ shards, dev.txt, test.txt, vocab.txt, stats.json"),
    lang: str = typer.Option("en", help="spaCy language whose tokenizer inference will use"),
    seed: int = typer.Option(0, help="Shuffling seed"),
    dev_fraction: float = typer.Option(0.01, help="Share of sentences held out for dev"),
    test_fraction: float = typer.Option(0.01, help="Share of sentences held out for test"),
    sentences_per_shard: int = typer.Option(100_000, help="Training sentences per shard file"),
    min_count: int = typer.Option(1, help="Keep tokens seen at least this often in the vocabulary"),
    max_vocab: int = typer.Option(0, help="Vocabulary size limit including <S>, </S>, <UNK> (0: none)"),
    vocab: Optional[Path] = typer.Option(None, help="Use this vocab.txt (e.g. of the model training continues from) instead of building one"),
    max_document_chars: int = typer.Option(MAX_DOCUMENT_CHARS, help="Cut documents to this many characters before tokenizing"),
    extend_vocab: bool = typer.Option(False, help="With --vocab: add the training tokens it lacks that are seen at least --min-count times"),
    rank_vocab: bool = typer.Option(False, help="With --vocab: rank its words (and any added) by their counts in this text, as the sampled softmax assumes"),
) -> None:
    """Tokenize, sentence-split, deduplicate, shuffle and split a corpus; write its vocabulary."""
    with clean_errors():
        stats = prepare_corpus(
            input_path,
            output_dir,
            lang,
            seed,
            dev_fraction,
            test_fraction,
            sentences_per_shard,
            min_count,
            max_vocab,
            vocab,
            max_document_chars,
            extend_vocab,
            rank_vocab,
        )
    typer.echo(
        f"{stats.documents} documents -> {stats.sentences} sentences ({stats.duplicate_sentences} duplicates dropped, "
        f"{stats.lines_with_invalid_utf8} lines with invalid UTF-8 replaced); train {stats.train_sentences} "
        f"({stats.tokens} tokens), dev {stats.dev_sentences}, test {stats.test_sentences}; vocab {stats.vocab_size}"
    )
    for split, fraction, count in (("dev", dev_fraction, stats.dev_sentences), ("test", test_fraction, stats.test_sentences)):
        if fraction > 0 and count == 0:
            typer.echo(
                f"warning: the {split} split is empty ({fraction} of {stats.sentences - stats.duplicate_sentences} sentences rounds to 0): "
                f"raise --{split}-fraction or give more text" + (" (without dev sentences model-best is the last model)" if split == "dev" else "")
            )
    typer.echo(
        f"{stats.control_characters_removed} control characters removed, {stats.documents_cut_for_length} documents "
        f"cut to {max_document_chars} characters ({stats.characters_cut_for_length} cut), {stats.long_runs_split} long runs "
        "without whitespace split, "
        f"{stats.jsonl_lines_dropped_for_length} .jsonl lines dropped for length, "
        f"{stats.empty_documents_dropped} empty documents dropped"
    )
