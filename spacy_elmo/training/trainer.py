"""The pretraining loop: batches, steps, evaluation, metrics, checkpoints and resume.

What goes where in the output folder is in `outputs`; how a run starts there (afresh,
resumed, replacing) is decided by `start.plan_start`; checkpoints and model directories
are written by `checkpoint`.

In a run of several processes every process runs this loop in step. Calls marked
"collective" below are ones every process must make at the same point, in the same
order; only rank 0 writes files.

A step whose loss or gradient is not finite is skipped (see `nonfinite`): the weights,
the optimizer state and the step counter stay as they were, so the learning-rate
schedule, `max_steps` and the log, eval and checkpoint intervals count good steps only
(a decay over seconds counts the time of every step);
its batch is consumed (the data position moves past it) but not counted in `tokens`.
Log lines carry `skipped_steps` (since the previous line) and `skipped_steps_total`.
After `training.max_bad_steps` skipped steps in a row the run stops with
`NonFiniteTraining`, writing no checkpoint. A failed write stops the run with a
`WriteError` naming the file, the cause and the checkpoint to resume from.
"""

import dataclasses
import gc
import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from thinc.api import Config
from tqdm import tqdm

from ..devices import TRAINING_DEVICES, pick_device
from ..heap import keep_freed_memory
from ..io import load_bilm
from ..io.digests import model_digests
from ..io.staging import WriteError
from ..nn.bilm import BiLM
from ..nn.fused_loops import fused_loops
from ..nn.objective import BiLMObjective
from ..nn.precision import bf16_is_fast
from ..nn.softmax import FullSoftmax, SampledSoftmax
from ..nn.warm_state import without_warm_state
from .checkpoint import (
    BEST_CHECKPOINT,
    CHECKPOINTS_DIR,
    LAST_CHECKPOINT,
    MODEL_BEST,
    MODEL_LAST,
    Progress,
    ThroughputWindow,
    carry_over_softmax,
    corpus_fingerprint,
    remove_staging_leftovers,
    save_checkpoint,
    save_trained_model,
)
from .config import PathsSettings, PretrainConfig
from .data import VOCAB_FILE, BatchStream, Sentence, Vocabulary, read_sentences, to_tensors, train_shards
from .distributed import (
    agree_on_budget,
    barrier,
    data_parallel,
    gather_rng_states,
    set_rng_states,
    start_process,
    stop_process,
    sum_values,
)
from .nonfinite import NonFiniteTraining, agree_on_step
from .optim import learning_rate_factor, make_optimizer
from .outputs import PRETRAIN_CONFIG_FILE, append_metrics, check_not_an_output, clear_training, truncate_metrics
from .perplexity import NLLSums, Perplexity, nll_sums, perplexity_of
from .signals import StopRequest, TrainingInterrupted
from .start import StartMode, StartPlan, find_training, plan_start

logger = logging.getLogger(__name__)


def load_init_bilm(paths: PathsSettings) -> BiLM:
    """The biLM of `paths.init_from`: a model directory, a pipeline, or public weights."""
    assert paths.init_from is not None
    bilm = load_bilm(paths.init_from, paths.init_options, names=("paths.init_from", "paths.init_options"))
    return without_warm_state(bilm).train()  # a warm state is for inference only


def build_objective(config: PretrainConfig, vocab: Vocabulary, bilm: Optional[BiLM] = None) -> BiLMObjective:
    """The biLM (`bilm`, or a fresh one of shape `config.model`, a word-level one over
    `vocab`) with a new softmax head over `vocab`."""
    if bilm is None:
        bilm = BiLM(config.model, vocab.tokens if config.model.token_encoder == "words" else None)
    dim, size = bilm.config.projection_dim, len(vocab)
    head = FullSoftmax(dim, size) if config.head.type == "full" else SampledSoftmax(dim, size, config.head.n_samples)
    if config.head.bias_init == "log_uniform":
        head.start_at_log_uniform()
    return BiLMObjective(bilm, head, config.training.dropout, config.training.weight_drop)


class Trainer:
    """One process's share of a (possibly data-parallel) pretraining run."""

    def __init__(self, config: PretrainConfig, output_dir: Union[str, Path], mode: StartMode = StartMode.NEW, progress_bar: bool = True) -> None:
        self.output_dir = Path(output_dir)
        self.checkpoints = self.output_dir / CHECKPOINTS_DIR
        self._set_up_process(config)
        shards = self._read_corpus(config)
        plan = plan_start(config, mode, find_training(self.output_dir, mode), self.corpus, self.process.world_size)
        self.config, self.objective = self._build_objective(plan, shards)  # before the folder is cleared: a bad init model keeps the old run
        self._prepare_folder(plan)
        settings = self.config.training
        if 0 < settings.max_steps <= self.config.schedule.warmup_steps:
            logger.warning(
                "training.max_steps (%d) ends the run inside its warmup (schedule.warmup_steps %d): the learning rate never reaches %g",
                settings.max_steps,
                self.config.schedule.warmup_steps,
                self.config.optimizer.learning_rate,
            )
        self.parameters = [p for p in self.objective.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(self.config.optimizer, self.parameters)
        torch.manual_seed(settings.seed * 1_000 + self.process.rank)  # dropout and sampling differ per process
        self.progress = Progress()
        if plan.checkpoint is not None:
            self._restore(plan.checkpoint)
        self.model = data_parallel(self.objective, self.process)  # collective (DDP checks every process's parameters)
        batching = self.config.batching
        self.stream = BatchStream(
            shards, batching.tokens_per_batch, batching.max_sentence_tokens, batching.bucket_batches, settings.seed, self.progress.position
        )
        self.show_progress = progress_bar and self.process.is_main
        self._checkpointed_step = self.progress.step if plan.checkpoint is not None else -1
        barrier(self.process)  # collective: the folder is cleared before rank 0 writes into it
        if self.process.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            Config(self.config.to_dict()).to_disk(self.output_dir / PRETRAIN_CONFIG_FILE)

    def _set_up_process(self, config: PretrainConfig) -> None:
        """This process's device, process group, torch threads and precision."""
        settings = config.training
        self.device = pick_device(settings.device, TRAINING_DEVICES, auto=True, torchrun=True, name="training.device")
        self.process = start_process(self.device)
        if settings.num_threads:
            torch.set_num_threads(settings.num_threads)
        if self.device.type == "cpu":
            if config.head.type == "sampled":
                keep_freed_memory()  # every step reallocates the same large buffers
            # not the full head: its logits (the step's tokens x the vocabulary, hundreds of
            # MB) change size every step and, kept in the heap, fragment it without bound
            # (24 GB in under 100 steps of pretrain-adapt.cfg with its 53k words)
            started = time.perf_counter()  # a first build of the fused loops takes 15-20 s on 2 cores, before the clock starts
            loops = "fused (C++)" if fused_loops() is not None else "Python"
            logger.info("LSTM time loops: %s, ready in %.1f s", loops, time.perf_counter() - started)
        self.autocast = bool(settings.mixed_precision) and bf16_is_fast(self.device)
        if settings.mixed_precision is True and not self.autocast:
            logger.warning("training.mixed_precision: %s has no native bfloat16 (GPU, or CPU with AVX512-BF16 or AMX); training in fp32", self.device)
        logger.info("training in %s on %s", "bf16 autocast" if self.autocast else "fp32", self.device)

    def _read_corpus(self, config: PretrainConfig) -> List[Path]:
        """Read the vocabulary, the fingerprint of what the run reads (the corpus, and the
        `paths.init_from` model) and the dev sentences; the training shards, which the batch
        stream reads as it goes."""
        corpus = Path(config.paths.corpus)
        if config.paths.init_from is not None:
            check_not_an_output(Path(config.paths.init_from), self.output_dir, "paths.init_from")
        self.vocab = Vocabulary.from_file(corpus / VOCAB_FILE)
        shards = train_shards(corpus)
        dev_path = corpus / "dev.txt"
        self.corpus = corpus_fingerprint(corpus / VOCAB_FILE, shards, dev_path)
        if config.paths.init_from is not None:  # a resumed run must start from the same model
            self.corpus["init_from"] = model_digests(config.paths.init_from, config.paths.init_options)
        self.dev = read_sentences(dev_path, config.batching.max_sentence_tokens) if dev_path.is_file() else []
        if not self.dev:
            logger.warning("%s is empty or missing: no dev perplexity, model-best/ will be the last model", dev_path)
        return shards

    def _prepare_folder(self, plan: StartPlan) -> None:
        """Say how the run starts; rank 0 clears the folder of a replaced training, or the
        staging leftovers of a resumed one (collective)."""
        if plan.discarded:
            logger.warning("starting afresh in %s: %s", self.output_dir, plan.discarded)
        elif plan.checkpoint is not None:
            logger.info("resuming the training in %s at step %d", self.output_dir, plan.checkpoint["progress"]["step"])
        barrier(self.process)  # collective: every process has read the folder before rank 0 changes it
        if self.process.is_main:
            if plan.clear:
                clear_training(self.output_dir)
            elif plan.checkpoint is not None:
                remove_staging_leftovers(self.output_dir)

    def _build_objective(self, plan: StartPlan, shards: List[Path]) -> Tuple[PretrainConfig, BiLMObjective]:
        """(the config the run trains with, its objective on this process's device). The
        biLM starts from the checkpoint's word table, `paths.init_from`, or fresh weights
        from `training.seed`: the same in every process."""
        config, checkpoint = plan.config, plan.checkpoint
        torch.manual_seed(config.training.seed)
        bilm = None
        if checkpoint is not None:
            if checkpoint.get("words") is not None:  # the word table of the model it started from
                bilm = BiLM(config.model, checkpoint["words"])
        elif config.paths.init_from is not None:
            bilm = load_init_bilm(config.paths)
            if bilm.config != config.model:
                logger.warning("[model] replaced by the shape of %s", config.paths.init_from)
            config = dataclasses.replace(config, model=bilm.config)
        objective = build_objective(config, self.vocab, bilm).to(self.device)
        if checkpoint is None and config.paths.init_from is not None:
            carry_over_softmax(objective.head, config.paths.init_from, self.vocab, shards)
        return config, objective

    def _restore(self, checkpoint: Dict[str, Any]) -> None:
        self.objective.load_state_dict(checkpoint["objective"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.progress = Progress.from_dict(checkpoint["progress"])
        set_rng_states(checkpoint["rng"][self.process.rank])
        if self.process.is_main:
            truncate_metrics(self.output_dir, self.progress.step)

    def train(self) -> Progress:
        """Run until the budget is spent. SIGINT / SIGTERM stop at the next step boundary
        with a checkpoint, then raise KeyboardInterrupt."""
        settings = self.config.training
        bar = tqdm(total=settings.max_steps or None, initial=self.progress.step, disable=not self.show_progress, unit="step", dynamic_ncols=True)
        run_start = time.perf_counter() - self.progress.elapsed_seconds
        try:
            with StopRequest() as stop:
                while True:
                    spent, interrupted, elapsed = self._should_stop(time.perf_counter() - run_start, stop.requested)  # collective
                    if interrupted:
                        self._checkpoint(LAST_CHECKPOINT)  # collective
                        raise TrainingInterrupted
                    if spent:
                        break
                    step_start = time.perf_counter()
                    result = self._step(next(self.stream), elapsed)  # collective
                    self.progress.position = self.stream.position
                    self.progress.elapsed_seconds = time.perf_counter() - run_start
                    if result is None:
                        self._after_skipped_step()
                        continue
                    self._count_step(*result, time.perf_counter() - step_start)
                    bar.update(1)
                    self._after_step(bar)  # collective
            evaluates_at_end = self.progress.evaluated_step != self.progress.step
            if evaluates_at_end and self._evaluate_and_keep_best(bar):  # collective
                self._checkpoint(BEST_CHECKPOINT)  # collective
            if evaluates_at_end or self._checkpointed_step != self.progress.step:  # last.pt holds the final best too
                self._checkpoint(LAST_CHECKPOINT)  # collective
            if not self.dev and self.process.is_main:
                self._save_model(MODEL_BEST, {})
            barrier(self.process)  # collective: no process tears the group down while another still works
        except WriteError as err:
            raise WriteError(err.path, err.cause, f"the run stopped; {self._last_checkpoint()}") from err.cause
        finally:
            bar.close()
            if self.model is not self.objective:  # DDP's reducer holds the process group: let it go first
                self.model = self.objective
                gc.collect()
            stop_process(self.process)
        return self.progress

    def _count_step(self, loss_sum: float, predictions: int, tokens: int, seconds: float) -> None:
        progress = self.progress
        progress.step += 1
        progress.tokens += tokens
        progress.bad_streak = 0
        progress.window.add_step(loss_sum, predictions, tokens, seconds)

    def _after_skipped_step(self) -> None:
        """Count a skipped step; stop the run after `max_bad_steps` of them in a row."""
        progress, limit = self.progress, self.config.training.max_bad_steps
        progress.skipped_steps += 1
        progress.window.skipped += 1
        progress.bad_streak += 1
        logger.warning(
            "a step after step %d had a non-finite loss or gradient: skipped (%d in a row, %d in all)",
            progress.step,
            progress.bad_streak,
            progress.skipped_steps,
        )
        if progress.bad_streak < limit:
            return
        message = (
            f"{progress.bad_streak} consecutive steps after step {progress.step} had a non-finite loss or gradient "
            f"(training.max_bad_steps = {limit}): the run stopped; {self._last_checkpoint()}"
        )
        self._log({"step": progress.step, "skipped_steps": progress.window.skipped, "skipped_steps_total": progress.skipped_steps, "stopped": message})
        raise NonFiniteTraining(message)

    def _last_checkpoint(self) -> str:
        """Where the last good state on disk is, for the message of a stopped run."""
        if self._checkpointed_step < 0:
            return "no checkpoint was written yet"
        return f"the last good checkpoint is {self.checkpoints / LAST_CHECKPOINT} (step {self._checkpointed_step}): continue from it with --resume"

    def _after_step(self, bar: tqdm) -> None:
        settings, step = self.config.training, self.progress.step
        if step % settings.log_every == 0:
            window = self.progress.window
            loss = window.loss_sum / window.predictions
            record = {
                "step": step,
                "epoch": self.progress.position.epoch,
                "tokens": self.progress.tokens,
                "loss": loss,
                "train_perplexity": perplexity_of(loss),
                "tokens_per_second": window.tokens / window.seconds,
                "learning_rate": self.optimizer.param_groups[0]["lr"],
                "elapsed_seconds": self.progress.elapsed_seconds,
                "skipped_steps": window.skipped,
                "skipped_steps_total": self.progress.skipped_steps,
            }
            self._log(record)
            bar.set_postfix(loss=f"{loss:.3f}", ppl=f"{record['train_perplexity']:.1f}", tok_s=f"{record['tokens_per_second']:.0f}")
            self.progress.window = ThroughputWindow()
        if step % settings.eval_every == 0 and self._evaluate_and_keep_best(bar):  # collective
            self._checkpoint(BEST_CHECKPOINT)  # collective
        if step % settings.checkpoint_every == 0:
            self._checkpoint(LAST_CHECKPOINT)  # collective

    def _should_stop(self, elapsed: float, interrupted: bool) -> Tuple[bool, bool, float]:
        """(budget spent, interrupted, elapsed seconds), agreed by all processes."""
        settings = self.config.training
        spent = bool(settings.max_steps and self.progress.step >= settings.max_steps)
        spent |= bool(settings.max_epochs and self.stream.upcoming_epoch() >= settings.max_epochs)
        spent |= bool(settings.max_seconds and elapsed >= settings.max_seconds)
        return agree_on_budget(spent, interrupted, elapsed, self.process, self.device)

    def _step(self, sentences: List[Sentence], elapsed: float) -> Optional[Tuple[float, int, int]]:
        """One optimizer step on a global batch, `elapsed` seconds into the run; returns its
        summed NLL (mean of the two directions), predictions per direction and tokens, all
        processes together, or None when the step was skipped for a non-finite loss or
        gradient."""
        self.objective.train()
        self.optimizer.zero_grad(set_to_none=True)
        predictions = sum(len(s) + 1 for s in sentences)
        share = sentences[self.process.rank :: self.process.world_size]
        loss_sum = 0.0
        if share:
            batch = to_tensors(share, self.vocab, self.objective.bilm)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                result = self.model(*(t.to(self.device) for t in batch))
                nll = result.forward_nll + result.backward_nll
            # each process's share of the global mean loss: the gradients DDP sums are its gradient
            (nll / (2 * predictions)).backward()  # collective: DDP's all-reduce
            loss_sum = float(nll.detach()) / 2
        else:
            self._contribute_nothing(sentences[:1])  # collective: DDP's all-reduce
        loss_sum, finite = agree_on_step(loss_sum, self.parameters, self.process, self.device)
        if not finite:
            return None
        if self.config.training.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.config.training.grad_clip)
        factor = learning_rate_factor(self.config.schedule, self.config.training, self.progress.step + 1, elapsed)
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.optimizer.learning_rate * factor
        self.optimizer.step()
        return loss_sum, predictions, sum(len(s) for s in sentences)

    def _contribute_nothing(self, stand_in: List[Sentence]) -> None:
        """Take part in the gradient all-reduce with zero gradients, for a process with no
        sentence in this batch: DDP needs a forward pass (over `stand_in`, without drawing
        from this process's random numbers) and a backward pass reaching every parameter."""
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            self.model(*(t.to(self.device) for t in to_tensors(stand_in, self.vocab, self.objective.bilm)))
        (torch.stack([p.sum() for p in self.parameters]).sum() * 0.0).backward()

    def _evaluate_and_keep_best(self, bar: tqdm) -> bool:
        """Exact dev perplexity in fp32, each process scoring its share of the dev set;
        True if it improved on the best so far (model-best/ is then rewritten)."""
        self.progress.evaluated_step = self.progress.step
        if not self.dev:
            return False
        share = self.dev[self.process.rank :: self.process.world_size]
        own = nll_sums(self.objective, share, self.vocab, self.config.batching.tokens_per_batch, self.device)
        forward, backward, predictions = sum_values(list(own), self.process, self.device)
        result = Perplexity.from_sums(NLLSums(forward, backward, int(predictions)))
        improved = self.progress.best_dev_perplexity is None or result.mean < self.progress.best_dev_perplexity
        if improved:
            self.progress.best_dev_perplexity, self.progress.best_step = result.mean, self.progress.step
        if self.process.is_main:
            self._log({"step": self.progress.step, **result.as_dict("dev_")})
            bar.write(f"step {self.progress.step}: dev perplexity {result.mean:.2f} (forward {result.forward:.2f}, backward {result.backward:.2f})")
            if improved:
                self._save_model(MODEL_BEST, result.as_dict("dev_"))
        return improved

    def _checkpoint(self, name: str) -> None:
        """Write checkpoints/`name` (collective: every process calls it); "last.pt" also
        refreshes model-last/."""
        rng = gather_rng_states(self.process)
        if self.process.is_main:
            save_checkpoint(self.checkpoints / name, self.objective, self.optimizer, self.progress, rng, self.config.to_dict(), self.corpus)
        if name == LAST_CHECKPOINT:
            self._checkpointed_step = self.progress.step
            if self.process.is_main:
                self._save_model(MODEL_LAST, {})
        barrier(self.process)

    def _save_model(self, name: str, scores: Dict[str, float]) -> None:
        info = {
            "step": self.progress.step,
            "tokens": self.progress.tokens,
            "max_sentence_tokens": self.config.batching.max_sentence_tokens,
            **scores,
        }
        save_trained_model(self.objective, self.vocab, self.output_dir / name, info)

    def _log(self, record: Dict[str, Any]) -> None:
        if self.process.is_main:
            append_metrics(self.output_dir, record)


def pretrain(
    config: PretrainConfig,
    output_dir: Union[str, Path],
    resume: bool = False,
    overwrite: bool = False,
    progress_bar: bool = True,
    auto_resume: bool = False,
) -> Progress:
    """Train a biLM as `config` says, writing into `output_dir`; see the module docstring.
    The caller's torch thread count is restored afterwards."""
    threads = torch.get_num_threads()
    try:
        return Trainer(config, output_dir, StartMode.from_flags(resume, overwrite, auto_resume), progress_bar).train()
    finally:
        torch.set_num_threads(threads)
