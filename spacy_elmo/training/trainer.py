"""The pretraining loop: batches, steps, evaluation, metrics, checkpoints and resume.

Output directory layout:
    config.cfg              the validated config this training runs
    metrics.jsonl           one JSON object per log interval and per evaluation
    checkpoints/last.pt     everything to resume exactly (and checkpoints/best.pt)
    model-last/, model-best/  model directories the `elmo` component loads
"""
import contextlib
import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple, Union

import torch
from thinc.api import Config
from tqdm import tqdm

from ..io import find_model_dir, load_model, load_public_model
from ..nn.bilm import BiLM
from ..nn.config import BiLMConfig
from ..nn.objective import BiLMObjective
from ..nn.softmax import FullSoftmax, SampledSoftmax
from .checkpoint import Progress, load_checkpoint, save_checkpoint, save_trained_model
from .config import PathsSettings, PretrainConfig
from .data import BatchStream, Sentence, Vocabulary, read_sentences, to_tensors, train_shards
from .distributed import (
    Process,
    barrier,
    gather_rng_states,
    pick_device,
    set_rng_states,
    start_process,
    stop_process,
    sum_gradients,
    sum_values,
)
from .optim import learning_rate_factor, make_optimizer
from .perplexity import perplexity

logger = logging.getLogger(__name__)

BUDGET_KEYS = ("max_steps", "max_seconds", "max_epochs")
"""[training] keys a resumed run may change (to extend the budget)."""


def initial_bilm(paths: PathsSettings, model: BiLMConfig) -> BiLM:
    """A fresh biLM of shape `model`, or the weights of `paths.init_from` (whose shape wins)."""
    if paths.init_from is None:
        return BiLM(model)
    source = Path(paths.init_from)
    if source.suffix in (".hdf5", ".h5"):
        if paths.init_options is None:
            raise ValueError("paths.init_from is a public .hdf5 file: set paths.init_options to its options.json")
        bilm = load_public_model(paths.init_options, source)
    else:
        bilm = load_model(find_model_dir(source))
    if bilm.config.warm_state:
        bilm = _without_warm_state(bilm)
    if bilm.config != model:
        logger.warning("[model] ignored: the biLM shape comes from %s", source)
    return bilm.train()


def _without_warm_state(bilm: BiLM) -> BiLM:
    config = BiLMConfig.from_dict({**bilm.config.to_dict(), "warm_state": False})
    fresh = BiLM(config)
    fresh.load_state_dict({k: v for k, v in bilm.state_dict().items() if not k.startswith("warm_")})
    return fresh


def build_objective(config: PretrainConfig, vocab_size: int) -> BiLMObjective:
    bilm = initial_bilm(config.paths, config.model)
    dim = bilm.config.projection_dim
    head = FullSoftmax(dim, vocab_size) if config.head.type == "full" else SampledSoftmax(dim, vocab_size, config.head.n_samples)
    return BiLMObjective(bilm, head, config.training.dropout)


class Trainer:
    """One process's share of a (possibly data-parallel) pretraining run."""

    def __init__(self, config: PretrainConfig, output_dir: Union[str, Path], resume: bool = False, progress_bar: bool = True) -> None:
        settings = config.training
        self.config = config
        self.output_dir = Path(output_dir)
        self.device = pick_device(settings.device)
        self.process = start_process(self.device)
        if settings.num_threads:
            torch.set_num_threads(settings.num_threads)
        self.autocast = settings.mixed_precision and self.device.type == "cuda"
        if settings.mixed_precision and not self.autocast:
            logger.warning("training.mixed_precision is for GPUs; training in fp32 on %s", self.device)
        corpus = Path(config.paths.corpus)
        self.vocab = Vocabulary.from_file(corpus / "vocab.txt")
        self.dev = read_sentences(corpus / "dev.txt", config.batching.max_sentence_tokens) if (corpus / "dev.txt").is_file() else []
        torch.manual_seed(settings.seed)  # the same initial weights in every process
        self.objective = build_objective(config, len(self.vocab)).to(self.device)
        self.parameters = [p for p in self.objective.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(config.optimizer, self.parameters)
        torch.manual_seed(settings.seed * 1_000 + self.process.rank)  # dropout and sampling differ per process
        self.progress = Progress()
        self.checkpoints = self.output_dir / "checkpoints"
        if resume:
            self._resume()
        elif (self.checkpoints / "last.pt").exists():
            raise ValueError(f"{self.output_dir} already holds a training; pass --resume to continue it, or choose another directory")
        self.stream = BatchStream(
            train_shards(corpus),
            config.batching.tokens_per_batch,
            config.batching.max_sentence_tokens,
            config.batching.bucket_batches,
            settings.seed,
            self.progress.position,
        )
        self.show_progress = progress_bar and self.process.is_main
        if self.process.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            Config(config.to_dict()).to_disk(self.output_dir / "config.cfg")

    def _resume(self) -> None:
        content = load_checkpoint(self.checkpoints / "last.pt")
        saved, current = content["config"], self.config.to_dict()
        for section in saved:
            for key in set(saved[section]) | set(current[section]):
                if saved[section].get(key) != current[section].get(key) and not (section == "training" and key in BUDGET_KEYS):
                    raise ValueError(
                        f"cannot resume: [{section}] {key} was {saved[section].get(key)!r}, is now {current[section].get(key)!r}"
                    )
        if len(content["rng"]) != self.process.world_size:
            raise ValueError(f"cannot resume: the checkpoint was written by {len(content['rng'])} processes, this run has {self.process.world_size}")
        self.objective.load_state_dict(content["objective"])
        self.optimizer.load_state_dict(content["optimizer"])
        self.progress = Progress.from_dict(content["progress"])
        set_rng_states(content["rng"][self.process.rank])
        if self.process.is_main:
            _truncate_metrics(self.output_dir / "metrics.jsonl", self.progress.step)

    def train(self) -> Progress:
        """Run until the budget is spent; Ctrl-C saves a checkpoint first."""
        settings = self.config.training
        bar = tqdm(total=settings.max_steps or None, initial=self.progress.step, disable=not self.show_progress, unit="step", dynamic_ncols=True)
        window_loss = window_tokens = window_predictions = 0.0
        window_start = time.perf_counter()
        run_start = time.perf_counter() - self.progress.elapsed_seconds
        try:
            while not self._budget_spent(time.perf_counter() - run_start):
                loss_sum, predictions, tokens = self._step(next(self.stream))
                self.progress.step += 1
                self.progress.position = self.stream.position
                self.progress.tokens += tokens
                self.progress.elapsed_seconds = time.perf_counter() - run_start
                window_loss += loss_sum
                window_predictions += predictions
                window_tokens += tokens
                bar.update(1)
                step = self.progress.step
                if step % settings.log_every == 0:
                    seconds = time.perf_counter() - window_start
                    record = {
                        "step": step,
                        "epoch": self.progress.position.epoch,
                        "tokens": self.progress.tokens,
                        "loss": window_loss / window_predictions,
                        "train_perplexity": math.exp(min(window_loss / window_predictions, 50.0)),
                        "tokens_per_second": window_tokens / seconds,
                        "learning_rate": self.optimizer.param_groups[0]["lr"],
                        "elapsed_seconds": self.progress.elapsed_seconds,
                    }
                    self._log(record)
                    bar.set_postfix(loss=f"{record['loss']:.3f}", ppl=f"{record['train_perplexity']:.1f}", tok_s=f"{record['tokens_per_second']:.0f}")
                    window_loss = window_tokens = window_predictions = 0.0
                    window_start = time.perf_counter()
                if step % settings.eval_every == 0 and self._evaluate_and_keep_best(bar):
                    self._checkpoint("best.pt")
                if step % settings.checkpoint_every == 0:
                    self._checkpoint("last.pt")
        except KeyboardInterrupt:
            logger.warning("interrupted at step %d: saving a checkpoint to resume from", self.progress.step)
            self._checkpoint("last.pt")
            raise
        finally:
            bar.close()
        if self.progress.best_dev_perplexity is None or self.progress.step % settings.eval_every:
            if self._evaluate_and_keep_best(bar):
                self._checkpoint("best.pt")
        self._checkpoint("last.pt")
        stop_process(self.process)
        return self.progress

    def _budget_spent(self, elapsed: float) -> bool:
        settings = self.config.training
        spent = bool(settings.max_steps and self.progress.step >= settings.max_steps)
        spent |= bool(settings.max_epochs and self.stream.upcoming_epoch() >= settings.max_epochs)
        spent |= bool(settings.max_seconds and elapsed >= settings.max_seconds)
        # all processes stop together, even if their clocks disagree
        return bool(sum_values([float(spent)], self.process, self.device)[0])

    def _step(self, sentences: List[Sentence]) -> Tuple[float, int, int]:
        """One optimizer step on a global batch; returns its summed NLL (both directions),
        predictions (per direction) and tokens, all processes together."""
        self.objective.train()
        self.optimizer.zero_grad(set_to_none=True)
        predictions = sum(len(s) + 1 for s in sentences)
        share = sentences[self.process.rank :: self.process.world_size]
        loss_sum = 0.0
        if share:
            batch = to_tensors(share, self.vocab, self.objective.bilm.config.max_characters_per_token)
            with self._precision():
                result = self.objective(*(t.to(self.device) for t in batch))
                loss = (result.forward_nll + result.backward_nll) / (2 * predictions)
            loss.backward()
            loss_sum = float((result.forward_nll + result.backward_nll).detach()) / 2
        sum_gradients(self.parameters, self.process)
        if self.config.training.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.config.training.grad_clip)
        factor = learning_rate_factor(self.config.schedule, self.progress.step + 1, self.config.training.max_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.optimizer.learning_rate * factor
        self.optimizer.step()
        loss_sum = sum_values([loss_sum], self.process, self.device)[0]
        return loss_sum, predictions, sum(len(s) for s in sentences)

    def _precision(self) -> Any:
        if self.autocast:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _evaluate_and_keep_best(self, bar: tqdm) -> bool:
        """Dev perplexity (rank 0 computes, all processes learn the best); True if it improved."""
        if not self.dev:
            return False
        if self.process.is_main:
            result = perplexity(self.objective, self.dev, self.vocab, self.config.batching.tokens_per_batch, self.device, self.autocast)
            self._log({"step": self.progress.step, **result.as_dict("dev_")})
            bar.write(f"step {self.progress.step}: dev perplexity {result.mean:.2f} (forward {result.forward:.2f}, backward {result.backward:.2f})")
            best = self.progress.best_dev_perplexity
            if best is None or result.mean < best:
                self.progress.best_dev_perplexity, self.progress.best_step = result.mean, self.progress.step
                self._save_model("model-best", result.as_dict("dev_"))
        values = sum_values(
            [self.progress.best_dev_perplexity or 0.0, float(self.progress.best_step)] if self.process.is_main else [0.0, 0.0],
            self.process,
            self.device,
        )
        self.progress.best_dev_perplexity, self.progress.best_step = (values[0] or None), int(values[1])
        return self.progress.best_step == self.progress.step

    def _checkpoint(self, name: str) -> None:
        """Write checkpoints/`name` (collective: every process calls it); "last.pt" also
        refreshes model-last/."""
        rng = gather_rng_states(self.process)
        if self.process.is_main:
            save_checkpoint(self.checkpoints / name, self.objective, self.optimizer, self.progress, rng, self.config.to_dict())
            if name == "last.pt":
                self._save_model("model-last", {})
        barrier(self.process)

    def _save_model(self, name: str, scores: Dict[str, float]) -> None:
        info = {"step": self.progress.step, "tokens": self.progress.tokens, **scores}
        save_trained_model(self.objective, self.vocab, self.output_dir / name, info)

    def _log(self, record: Dict[str, Any]) -> None:
        if self.process.is_main:
            with (self.output_dir / "metrics.jsonl").open("a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop records a killed run wrote after its last checkpoint."""
    if path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        kept = []
        for line in lines:
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut by the kill
        path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def clear_training(output_dir: Union[str, Path]) -> None:
    """Remove what a training wrote into `output_dir` (checkpoints, models, metrics)."""
    output_dir = Path(output_dir)
    for name in ("checkpoints", "model-best", "model-last"):
        shutil.rmtree(output_dir / name, ignore_errors=True)
    for name in ("metrics.jsonl", "config.cfg"):
        (output_dir / name).unlink(missing_ok=True)


def pretrain(config: PretrainConfig, output_dir: Union[str, Path], resume: bool = False, progress_bar: bool = True) -> Progress:
    """Train a biLM as `config` says, writing into `output_dir`; see the module docstring."""
    return Trainer(config, output_dir, resume, progress_bar).train()
