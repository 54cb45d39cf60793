"""`pretrain` (train a biLM from a config) and `evaluate` (exact perplexity on a text)."""

import json
import logging
import os
from pathlib import Path
from typing import Optional

import typer
from spacy.cli._util import parse_config_overrides

from ..devices import TRAINING_DEVICES, pick_device
from ..io.staging import refuse_writing_over_inputs, write_text_atomically
from ..training.checkpoint import load_trained_model, trained_max_sentence_tokens
from ..training.config import load_config
from ..training.data import VOCAB_FILE, Vocabulary, read_sentences
from ..training.perplexity import at_vocabulary, perplexity
from ..training.signals import TrainingInterrupted
from ..training.trainer import pretrain as run_pretraining
from .app import app, clean_errors


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def pretrain(
    ctx: typer.Context,
    config_path: Path = typer.Argument(..., help="Pretraining config (spaCy config format), e.g. configs/pretrain-demo.cfg"),
    output_dir: Path = typer.Argument(..., help="Where checkpoints, metrics.jsonl, model-best/ and model-last/ go"),
    resume: bool = typer.Option(False, "--resume", help="Continue the training in OUTPUT_DIR from checkpoints/last.pt"),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete an earlier training's checkpoints, models and metrics in OUTPUT_DIR first"),
    auto_resume: bool = typer.Option(
        False, "--auto-resume", help="Resume if OUTPUT_DIR's checkpoint fits this config and corpus, else start afresh (replacing it)"
    ),
    init_from: Optional[Path] = typer.Option(None, help="Start from this model directory or pipeline (same as --paths.init_from)"),
    progress: bool = typer.Option(True, help="Show a progress bar"),
) -> None:
    """Train a biLM. Extra options override config values: --training.max_steps 100.

    Data parallel on several processes or GPUs: torchrun --nproc_per_node N -m spacy_elmo pretrain ...
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    overrides = parse_config_overrides(list(ctx.args))  # it consumes the list it reads
    if init_from is not None:
        overrides["paths.init_from"] = str(init_from)
        ctx.args.extend(["--paths.init_from", str(init_from)])
    with clean_errors():
        config = load_config(config_path, overrides)
        try:
            done = run_pretraining(config, output_dir, resume, overwrite, progress, auto_resume)
        except TrainingInterrupted as interrupted:
            if os.environ.get("RANK", "0") == "0":
                again = " ".join(["pretrain", str(config_path), str(output_dir), *ctx.args, "--resume"])
                typer.echo(f"Interrupted; checkpoints/last.pt holds the last step. Continue with the same launcher and: {again}", err=True)
            raise typer.Exit(130) from interrupted
    best = f"{done.best_dev_perplexity:.2f} at step {done.best_step}" if done.best_dev_perplexity else "n/a (no dev set)"
    typer.echo(
        f"Trained {done.step} steps, {done.tokens:,} tokens in {done.elapsed_seconds:.0f} s "
        f"({done.tokens / max(done.elapsed_seconds, 1e-9):,.0f} tokens/s); best dev perplexity {best}. Output in {output_dir}"
    )


@app.command()
def evaluate(
    model_dir: Path = typer.Argument(..., help="A pretraining model directory (model-best/ or model-last/)"),
    text: Path = typer.Argument(..., help="Sentences to score, one per line, tokenized as `corpus` does and joined by spaces (e.g. corpus/test.txt)"),
    output: Optional[Path] = typer.Option(None, help="Write the figures to this JSON file"),
    tokens_per_batch: int = typer.Option(4096, min=1, help="Padded tokens per batch"),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N"),
    max_sentence_tokens: Optional[int] = typer.Option(None, min=1, help="Score longer sentences in pieces of this many tokens (default: as in training)"),
    vocab_path: Optional[Path] = typer.Option(
        None,
        "--vocab",
        help="Score at this vocab.txt, part of the model's (e.g. the one it was extended from), its other words as <UNK>: comparable with models trained at it",
    ),
) -> None:
    """Exact forward, backward and mean perplexity of a trained biLM on a text."""
    with clean_errors():
        if not text.is_file():
            raise ValueError(f"{text}: file not found")
        if output is not None:
            refuse_writing_over_inputs(output, (model_dir, text, vocab_path))
        torch_device = pick_device(device, TRAINING_DEVICES, name="--device")
        objective, vocab = load_trained_model(model_dir)
        if vocab_path is not None:
            scored_at = Vocabulary.from_file(vocab_path)
            objective, vocab = at_vocabulary(objective, vocab, scored_at), scored_at
        objective.to(torch_device)
        if max_sentence_tokens is None:
            max_sentence_tokens = trained_max_sentence_tokens(model_dir)
        sentences = read_sentences(text, max_sentence_tokens)
        result = perplexity(objective, sentences, vocab, tokens_per_batch, torch_device)
    scored_vocab = vocab_path or model_dir / VOCAB_FILE
    figures = {**result.as_dict(), "sentences": len(sentences), "model": str(model_dir), "text": str(text), "vocab": str(scored_vocab)}
    if output is not None:
        with clean_errors():
            write_text_atomically(output, json.dumps(figures, indent=2) + "\n")
    typer.echo(f"perplexity {result.mean:.2f} (forward {result.forward:.2f}, backward {result.backward:.2f}) over {len(sentences)} sentences")
