"""`validate`: what a model directory, pipeline, public weight file or training checkpoint
holds, or every problem found in it."""

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import numpy
import torch
import typer

from ..io import find_model_dir, load_lm_head, load_model_config
from ..io.lm_head import HEAD_FILE
from ..io.model_dir import TRAINING_FILE, read_training_record
from ..io.validate import (
    CHECKSUM_COVERS,
    Report,
    check_model_dir,
    check_public,
    describe_bilm,
    expected_shapes,
    shape_problems,
    value_problems,
    weights_checksum,
    word_problems,
)
from ..nn.bilm import BiLM
from ..training.checkpoint import TORCH_FILE_START, load_checkpoint, load_softmax_and_vocab
from ..training.config import PretrainConfig, config_from_dict
from ..training.data import VOCAB_FILE, Vocabulary
from .app import app

HDF5_FILE_START = b"\x89HDF\r\n\x1a\n"
CHECKPOINT_MODEL = "the checkpoint's [model] config"


@app.command()
def validate(
    path: Path = typer.Argument(..., help="Model directory, spaCy pipeline with elmo, public .hdf5 (with --options) or checkpoints/*.pt"),
    options: Optional[Path] = typer.Option(None, help="options.json when PATH is a public .hdf5 file"),
) -> None:
    """Describe a stored biLM (shapes, size, training state, weights checksum), or list
    every problem found in it and exit with status 1."""
    report = validate_path(path, options)
    typer.echo(render(report))
    if report.problems:
        raise typer.Exit(1)


def validate_path(path: Path, options: Optional[Path] = None) -> Report:
    """The report on `path`: its kind, facts when it is sound, every problem found."""
    report = Report(path, "unknown")
    if options is not None:
        report.kind = "public ELMo weights (hdf5 + options.json)"
        if path.is_dir():
            report.problem(path, "--options is for a public .hdf5 weight file, but this is a directory")
            return report
        bilm = check_public(path, options, report)
    elif path.is_dir():
        bilm = check_directory(path, report)
    elif path.is_file():
        bilm = check_file(path, report)
    else:
        report.problem(path, "not found")
        return report
    if bilm is not None:
        report.facts = {**describe_bilm(bilm), **report.facts, "weights sha256": weights_checksum(bilm)}
    return report


def render(report: Report) -> str:
    """The report as lines of text: kind, facts, then the problems or that there are none."""
    lines = [f"{report.path}: {report.kind}"]
    lines += [f"  {label}: {text}" for label, text in report.facts.items()]
    if "weights sha256" in report.facts:
        lines.append(f"  ({CHECKSUM_COVERS})")
    if report.problems:
        lines.append(f"{len(report.problems)} problem{'s' if len(report.problems) > 1 else ''} found:")
        lines += [f"  - {problem}" for problem in report.problems]
    else:
        lines.append("No problems found.")
    return "\n".join(lines)


def check_directory(path: Path, report: Report) -> Optional[BiLM]:
    """A model directory, or a spaCy pipeline with an elmo component."""
    model_dir = report.attempt(lambda: find_model_dir(path))
    if model_dir is None:
        return None
    if model_dir == path:
        report.kind = "spacy-elmo model directory"
    else:
        report.kind = "spaCy pipeline with an elmo component"
        report.facts["elmo component"] = f"{model_dir.name}/"
        check_pipeline_config(path, model_dir.name, report)
    bilm = check_model_dir(model_dir, report)
    if (model_dir / HEAD_FILE).exists() or (model_dir / VOCAB_FILE).exists():
        report.kind += " from pretraining (with its softmax)"
        check_softmax(model_dir, report)
        report.facts.update(training_facts(model_dir))
    return bilm


def check_pipeline_config(pipeline: Path, component: str, report: Report) -> None:
    """The pipeline's config.cfg must make `component` an elmo component."""
    from thinc.api import Config

    path = pipeline / "config.cfg"
    try:
        config = Config().from_disk(path, interpolate=False)
    except Exception as err:  # configparser, thinc and the decoder raise several unrelated types
        report.problem(path, f"not a readable spaCy config ({err})")
        return
    factory = config.get("components", {}).get(component, {}).get("factory")
    if factory != "elmo":
        report.problem(path, f"[components.{component}] has factory {factory!r}, but {component}/ holds an elmo model")


def check_softmax(model_dir: Path, report: Report) -> None:
    """A pretraining model directory's softmax.npz and vocab.txt: readable, finite, and one
    softmax row per vocabulary entry."""
    head = report.attempt(lambda: load_lm_head(model_dir))
    vocab = report.attempt(lambda: Vocabulary.from_file(model_dir / VOCAB_FILE), (ValueError,))
    if head is not None:
        arrays = {"weight": head[0].numpy(), "bias": head[1].numpy()}
        report.problems += value_problems(arrays, model_dir / HEAD_FILE)
    try:
        dim = load_model_config(model_dir).projection_dim
    except ValueError:  # already reported by the model directory's checks
        return
    if head is not None and vocab is not None and report.attempt(lambda: load_softmax_and_vocab(model_dir, dim)) is not None:
        report.facts["softmax"] = f"{len(vocab)} words x {dim} ({HEAD_FILE} and {VOCAB_FILE} agree)"


def training_facts(model_dir: Path) -> Dict[str, str]:
    """What a pretraining model directory's training.json says, as report facts."""
    info = read_training_record(model_dir) or {}
    keys = ("step", "tokens", "dev_mean", "max_sentence_tokens")
    found = [f"{key} {info[key]}" for key in keys if key in info]
    return {"training": ", ".join(found) + f" ({TRAINING_FILE})"} if found else {}


def check_file(path: Path, report: Report) -> Optional[BiLM]:
    """A checkpoint, or a public weight file given without its options."""
    try:
        with path.open("rb") as handle:
            start = handle.read(len(HDF5_FILE_START))
    except OSError as err:
        report.problem(path, f"cannot be read ({err.strerror})")
        return None
    if path.suffix == ".npz":  # a zip archive too, but not a checkpoint
        report.problem(path, f"one file of a model directory: give the directory ({path.parent})")
        return None
    if path.suffix in (".pt", ".pth") or start.startswith(TORCH_FILE_START):
        report.kind = "training checkpoint"
        return check_checkpoint(path, report)
    if path.suffix in (".hdf5", ".h5") or start == HDF5_FILE_START:
        report.kind = "public ELMo weights (hdf5)"
        report.problem(path, "a public ELMo weight file: give its options.json with --options")
    else:
        report.problem(path, "not a model directory, spaCy pipeline, public .hdf5 weight file or training checkpoint")
    return None


def check_checkpoint(path: Path, report: Report) -> Optional[BiLM]:
    """Every problem of a checkpoint's config, objective tensors and optimizer state; its
    biLM when the biLM's own tensors have none."""
    content = report.attempt(lambda: load_checkpoint(path))
    if content is None:
        return None
    config = checkpoint_config(content, path, report)
    tensors = content.get("objective")
    if not isinstance(tensors, dict) or not all(torch.is_tensor(t) for t in tensors.values()):
        report.problem(path, "holds no objective state (a name -> tensor map)")
        return None
    arrays = {name: to_numpy(tensor) for name, tensor in tensors.items()}
    bilm, head = part(arrays, "bilm."), part(arrays, "head.")
    report.facts.update(checkpoint_facts(content, config, head))
    words = content.get("words")
    bilm_problems = value_problems({"bilm." + name: array for name, array in bilm.items()}, path)
    if config is not None:
        bilm_problems += bilm_shape_problems(config, words, bilm, path)
    report.problems += bilm_problems + value_problems({"head." + name: array for name, array in head.items()}, path)
    if config is not None:
        report.problems += head_shape_problems(config, head, path)
    others = sorted(name for name in arrays if not name.startswith(("bilm.", "head.")))
    if others:
        report.problem(path, f"holds objective tensors {others} outside the biLM and its softmax")
    report.problems += value_problems(optimizer_arrays(content.get("optimizer")), path)
    if config is None or bilm_problems:
        return None
    model = BiLM(config.model, words)
    model.load_state_dict({name: torch.from_numpy(array) for name, array in bilm.items()})
    return model.eval()


def part(arrays: Mapping[str, numpy.ndarray], prefix: str) -> Dict[str, numpy.ndarray]:
    """The arrays whose names start with `prefix`, by the rest of their names."""
    return {name[len(prefix) :]: array for name, array in arrays.items() if name.startswith(prefix)}


def checkpoint_config(content: Dict[str, Any], path: Path, report: Report) -> Optional[PretrainConfig]:
    """The training config a checkpoint holds, validated as a resume would."""
    raw = content.get("config")
    if not isinstance(raw, dict):
        report.problem(path, "holds no training config")
        return None
    return report.attempt(lambda: config_from_dict(raw, f"{path}: the checkpoint's config"), (ValueError,))


def to_numpy(tensor: torch.Tensor) -> numpy.ndarray:
    """A tensor's values on the CPU; floating-point ones as float32 (numpy has no bfloat16)."""
    tensor = tensor.detach().cpu()
    return (tensor.float() if tensor.is_floating_point() else tensor).numpy()


def optimizer_arrays(optimizer: Any) -> Dict[str, numpy.ndarray]:
    """The floating-point tensors of an optimizer's state (e.g. Adam's moments), by parameter."""
    state = optimizer.get("state") if isinstance(optimizer, dict) else None
    if not isinstance(state, dict):
        return {}
    return {
        f"optimizer state of parameter {key}: {name}": to_numpy(value)
        for key, entry in state.items()
        if isinstance(entry, dict)
        for name, value in entry.items()
        if torch.is_tensor(value) and value.is_floating_point()
    }


def bilm_shape_problems(config: PretrainConfig, words: Any, bilm: Mapping[str, numpy.ndarray], path: Path) -> List[str]:
    """The biLM tensors and word list against the config's [model]."""
    problems = shape_problems(bilm, expected_shapes(config.model), path, CHECKPOINT_MODEL)
    if config.model.token_encoder == "words":
        if not isinstance(words, list):
            return problems + [f"{path}: a word-level biLM's checkpoint without its word list"]
        return problems + word_problems(words, bilm, path, path)
    if words is not None:
        problems.append(f"{path}: holds a word list, but {CHECKPOINT_MODEL} has token_encoder 'characters'")
    return problems


def head_shape_problems(config: PretrainConfig, head: Mapping[str, numpy.ndarray], path: Path) -> List[str]:
    """The softmax against the biLM's width: weight (vocabulary, P) and bias (vocabulary,)."""
    rows = head["weight"].shape[0] if "weight" in head and head["weight"].ndim == 2 else None
    wanted = {"weight": (rows, config.model.projection_dim), "bias": (rows,)}
    return shape_problems(head, wanted, f"{path} (softmax)", CHECKPOINT_MODEL)


def checkpoint_facts(content: Dict[str, Any], config: Optional[PretrainConfig], head: Mapping[str, numpy.ndarray]) -> Dict[str, str]:
    """Training progress, processes, corpus fingerprint and softmax size, where present."""
    facts = {}
    progress = content.get("progress")
    if isinstance(progress, dict):
        best = progress.get("best_dev_perplexity")
        facts["training"] = f"step {progress.get('step')}, {progress.get('tokens')} tokens, {progress.get('skipped_steps')} skipped steps, " + (
            f"best dev perplexity {best:.4g} at step {progress.get('best_step')}" if isinstance(best, float) else "no dev perplexity yet"
        )
    if isinstance(content.get("rng"), list):
        facts["processes"] = str(len(content["rng"]))
    corpus = content.get("corpus")
    if isinstance(corpus, dict):
        shards: List[Any] = corpus["shards"] if isinstance(corpus.get("shards"), list) else []
        size = sum(int(shard[1]) for shard in shards if isinstance(shard, list) and len(shard) == 2 and isinstance(shard[1], int))
        facts["corpus"] = f"vocab.txt sha256 {corpus.get('vocab_sha256')}, {len(shards)} training shards of {size:,} bytes"
    weight = head.get("weight")
    if config is not None and weight is not None and weight.ndim == 2:
        facts["softmax"] = f"{config.head.type}, {weight.shape[0]} words x {weight.shape[1]}"
    return facts
