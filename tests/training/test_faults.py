"""Pretraining under faults: non-finite steps never reach the weights, a failed write
keeps the previous checkpoint and model, a damaged checkpoint is a clear error."""

import copy
import errno
import json
import math
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import torch

from elmo_testing import DEMO_PRETRAIN_CONFIG, REPO, metric_records, no_space, saved_weights, tiny_pretrain_overrides
from spacy_elmo.io import ModelFileError
from spacy_elmo.io import staging as staging_module
from spacy_elmo.io.staging import WriteError
from spacy_elmo.training.checkpoint import load_checkpoint, load_trained_model, save_trained_model
from spacy_elmo.training.config import load_config
from spacy_elmo.training.nonfinite import NonFiniteTraining
from spacy_elmo.training.trainer import Trainer, pretrain

SAMPLED = {"head.type": "sampled", "head.n_samples": 5}


@pytest.fixture(autouse=True)
def keep_thread_count():
    """A Trainer sets torch's thread count (`pretrain` would restore it)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def config_for(corpus, extra=None, **training):
    return load_config(DEMO_PRETRAIN_CONFIG, {**tiny_pretrain_overrides(corpus, **training), **(extra or {})})


def folder_bytes(folder: Path) -> dict:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


class Snapshots:
    """Wraps a trainer's objective: records the weights and optimizer state before each
    training step (1-based), and spoils the steps in `bad` with `spoil`."""

    def __init__(self, trainer: Trainer, bad, spoil) -> None:
        self.trainer, self.bad, self.spoil = trainer, set(bad), spoil
        self.states = {}
        self._forward = trainer.objective.forward
        trainer.objective.forward = self._call

    def _call(self, *args):
        if not self.trainer.objective.training:  # dev perplexity
            return self._forward(*args)
        call = len(self.states) + 1
        weights = {name: t.detach().clone() for name, t in self.trainer.objective.state_dict().items()}
        self.states[call] = (weights, copy.deepcopy(self.trainer.optimizer.state_dict()))
        result = self._forward(*args)
        return self.spoil(self.trainer, result) if call in self.bad else result


def nan_loss(trainer, result):
    """A NaN loss whose gradients stay finite: only the loss check can catch it."""
    return result._replace(forward_nll=result.forward_nll + float("nan"))


def inf_gradient(trainer, result):
    """A finite loss with one infinite gradient entry in the softmax, this step only."""
    armed = [True]

    def plant(grad):
        if not armed:
            return grad
        armed.clear()
        grad = grad.clone()
        grad.view(-1)[0] = float("inf")
        return grad

    trainer.objective.head.weight.register_hook(plant)
    return result


def all_nan(trainer, result):
    return result._replace(forward_nll=result.forward_nll * float("nan"))


def same_state(first, second) -> bool:
    (weights_a, optimizer_a), (weights_b, optimizer_b) = first, second
    if weights_a.keys() != weights_b.keys() or not all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a):
        return False
    if optimizer_a["param_groups"] != optimizer_b["param_groups"] or optimizer_a["state"].keys() != optimizer_b["state"].keys():
        return False
    return all(
        state.keys() == optimizer_b["state"][key].keys() and all(torch.equal(value, optimizer_b["state"][key][name]) for name, value in state.items())
        for key, state in optimizer_a["state"].items()
    )


@pytest.mark.parametrize("spoil", [nan_loss, inf_gradient])
def test_a_non_finite_step_is_skipped_and_training_goes_on(toy_corpus, tmp_path, spoil):
    config = config_for(toy_corpus, {"schedule.warmup_steps": 4}, max_steps=6, eval_every=100, checkpoint_every=100)
    trainer = Trainer(config, tmp_path / "out", progress_bar=False)
    snapshots = Snapshots(trainer, bad=(3, 4), spoil=spoil)
    done = trainer.train()
    states = snapshots.states
    assert len(states) == 8 and done.step == 6 and done.skipped_steps == 2
    assert same_state(states[3], states[5])  # the two skipped steps changed nothing, bitwise
    assert same_state(states[3], states[4])
    assert not same_state(states[5], states[6])  # the next good step trains again
    assert all(int(state["step"]) == 6 for state in trainer.optimizer.state_dict()["state"].values())
    logs = [r for r in metric_records(tmp_path / "out") if "loss" in r]
    assert [r["step"] for r in logs] == [1, 2, 3, 4, 5, 6]
    assert all(math.isfinite(r["loss"]) for r in logs)
    assert [r["skipped_steps"] for r in logs] == [0, 0, 2, 0, 0, 0]
    assert [r["skipped_steps_total"] for r in logs] == [0, 0, 2, 2, 2, 2]
    warmup = [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]  # skipped steps do not move the schedule
    assert [r["learning_rate"] for r in logs] == pytest.approx([0.01 * f for f in warmup])


def test_consecutive_bad_steps_stop_the_run_and_keep_the_checkpoints(toy_corpus, tmp_path):
    out = tmp_path / "out"
    config = config_for(toy_corpus, max_steps=8, eval_every=2, checkpoint_every=2, max_bad_steps=3)
    trainer = Trainer(config, out, progress_bar=False)
    before = {}

    def keep_files_and_spoil(trainer, result):
        if not before:
            before.update({"checkpoints": folder_bytes(out / "checkpoints"), "model-best": folder_bytes(out / "model-best")})
        return all_nan(trainer, result)

    Snapshots(trainer, bad=range(5, 100), spoil=keep_files_and_spoil)
    with pytest.raises(NonFiniteTraining) as caught:
        trainer.train()
    message = str(caught.value)
    assert "3 consecutive steps after step 4 had a non-finite loss or gradient (training.max_bad_steps = 3)" in message
    assert f"the last good checkpoint is {out / 'checkpoints' / 'last.pt'} (step 4)" in message
    assert "\n" not in message
    assert folder_bytes(out / "checkpoints") == before["checkpoints"] and sorted(before["checkpoints"]) == ["best.pt", "last.pt"]
    assert folder_bytes(out / "model-best") == before["model-best"]
    stop = metric_records(out)[-1]
    assert stop["step"] == 4 and stop["skipped_steps"] == 3 and stop["skipped_steps_total"] == 3 and stop["stopped"] == message
    done = pretrain(config, out, resume=True, progress_bar=False)  # the fault is gone: it goes on from step 4
    assert done.step == 8 and done.skipped_steps == 0
    assert [r["step"] for r in metric_records(out) if "loss" in r] == list(range(1, 9))


def test_max_bad_steps_must_be_a_positive_int(toy_corpus):
    assert config_for(toy_corpus).training.max_bad_steps == 5
    with pytest.raises(ValueError, match=r"\[training\] max_bad_steps = 0: Input should be greater than or equal to 1"):
        config_for(toy_corpus, max_bad_steps=0)
    with pytest.raises(ValueError, match=r"\[training\] max_bad_steps = 2.5: Input should be a valid integer"):
        config_for(toy_corpus, max_bad_steps=2.5)


AGREE_SCRIPT = """
import json, sys, torch, torch.distributed as dist
from spacy_elmo.training.distributed import Process
from spacy_elmo.training.nonfinite import agree_on_step
rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
param = torch.nn.Parameter(torch.zeros(3))
cases = [(1.0, [1.0, 2.0, 3.0]), (float("nan") if rank == 1 else 1.0, [1.0, 1.0, 1.0]), (1.0, [float("inf") if rank == 0 else 0.0, 0.0, 0.0])]
verdicts = []
for loss, grad in cases:
    param.grad = torch.tensor(grad)
    dist.all_reduce(param.grad)  # as DDP sums them
    verdicts.append(agree_on_step(loss, [param], Process(rank, 2), torch.device("cpu")))
dist.destroy_process_group()
print(json.dumps([[total if total == total else "nan", ok] for total, ok in verdicts]))
"""


def two_ranks_print(script: str, tmp_path: Path) -> list:
    """Run `script` as ranks 0 and 1 of a gloo group; the JSON each printed last."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    store = tmp_path / "store"
    command = [sys.executable, "-c", script]
    ranks = [subprocess.Popen([*command, str(rank), str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for rank in (0, 1)]
    outputs = [process.communicate(timeout=120) for process in ranks]
    assert all(process.returncode == 0 for process in ranks), [err[-2000:] for _, err in outputs]
    return [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]


def test_every_process_takes_the_same_skip_decision(tmp_path):
    """A NaN loss on one rank with finite gradients, or an inf gradient on one rank: both skip."""
    verdicts = two_ranks_print(AGREE_SCRIPT, tmp_path)
    assert verdicts[0] == verdicts[1] == [[2.0, True], ["nan", False], [2.0, False]]


BUDGET_SCRIPT = """
import json, sys, torch, torch.distributed as dist
from spacy_elmo.training.distributed import Process, agree_on_budget
rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
process, cpu = Process(rank, 2), torch.device("cpu")
verdicts = [agree_on_budget(rank == 1, False, 10.0 + 2 * rank, process, cpu), agree_on_budget(False, rank == 0, 4.0, process, cpu)]
dist.destroy_process_group()
print(json.dumps(verdicts))
"""


def test_every_process_agrees_on_the_budget_and_the_clock(tmp_path):
    """One process spent (or interrupted) stops all; the elapsed time is one mean for all."""
    verdicts = two_ranks_print(BUDGET_SCRIPT, tmp_path)
    assert verdicts[0] == verdicts[1] == [[True, False, 11.0], [False, True, 4.0]]


class FullDisk:
    """Path.open whose files for checkpoints/last.pt take `room` bytes, then fail with
    ENOSPC; `model_best` keeps the files of model-best/ when such a write began."""

    def __init__(self, room: int = 2000) -> None:
        self.room = room
        self.real = pathlib.Path.open
        self.model_best = None

    def __call__(self, path, mode="r", *args, **kwargs):
        out = self.real(path, mode, *args, **kwargs)
        if mode != "wb" or not path.name.startswith(".last.pt.staging-"):
            return out
        self.model_best = folder_bytes(path.parent.parent / "model-best")
        return _FillingFile(out, self.room)


class _FillingFile:
    def __init__(self, out, room):
        self.out, self.room = out, room

    def write(self, data):
        if len(data) > self.room:
            self.out.write(data[: self.room])
            self.room = 0
            raise no_space()
        self.room -= len(data)
        return self.out.write(data)

    def __getattr__(self, name):
        return getattr(self.out, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.out.close()


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="the fault injection reads /proc/self/fd (Linux)")


def test_a_failed_checkpoint_write_keeps_the_previous_one_and_resume_ends_as_one_run(toy_corpus, tmp_path, monkeypatch):
    config = config_for(toy_corpus, SAMPLED, max_steps=12, eval_every=4, checkpoint_every=4, dropout=0.2)
    pretrain(config, tmp_path / "straight", progress_bar=False)
    out = tmp_path / "faulty"
    pretrain(config_for(toy_corpus, SAMPLED, max_steps=4, eval_every=4, checkpoint_every=4, dropout=0.2), out, progress_bar=False)
    last = out / "checkpoints" / "last.pt"
    intact = last.read_bytes()
    full_disk = FullDisk()
    monkeypatch.setattr(pathlib.Path, "open", lambda path, *args, **kwargs: full_disk(path, *args, **kwargs))
    with pytest.raises(WriteError) as caught:
        pretrain(config, out, resume=True, progress_bar=False)  # the write at step 8 fails
    monkeypatch.undo()
    message = str(caught.value)
    assert message == (
        f"{last}: could not be written (No space left on device); the run stopped; the last good checkpoint is {last} (step 4): continue from it with --resume"
    )
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC
    assert last.read_bytes() == intact and load_checkpoint(last)["progress"]["step"] == 4
    assert folder_bytes(out / "model-best") == full_disk.model_best
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["best.pt", "last.pt"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(("model-best.", "model-last."))]
    pretrain(config, out, resume=True, progress_bar=False)
    straight, resumed = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(out / "model-last")
    assert all(numpy.array_equal(straight[name], resumed[name]) for name in straight)
    losses = [[(r["step"], r["loss"]) for r in metric_records(tmp_path / name) if "loss" in r] for name in ("straight", "faulty")]
    assert losses[0] == losses[1] and len(losses[0]) == 12


def test_a_failed_model_write_keeps_model_best_and_leaves_no_staging(toy_corpus, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real_write_bytes = pathlib.Path.write_bytes
    written = []

    def write_bytes_then_fill_the_disk(path, data):
        if path.name == "softmax.npz" and path.parent.name.startswith("model-best.staging-"):
            written.append(folder_bytes(out / "model-best") if (out / "model-best").is_dir() else None)
            if len(written) == 2:
                real_write_bytes(path, data[: len(data) // 2])
                raise no_space()
        return real_write_bytes(path, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes_then_fill_the_disk)
    with pytest.raises(WriteError, match="model-best: could not be written \\(No space left on device\\); the run stopped; the last good checkpoint is"):
        pretrain(config_for(toy_corpus, max_steps=12, eval_every=2, checkpoint_every=2), out, progress_bar=False)
    monkeypatch.undo()
    assert len(written) == 2 and folder_bytes(out / "model-best") == written[1]
    assert load_trained_model(out / "model-best")[1].tokens
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "metrics.jsonl", "model-best", "model-last", "pretrain.cfg"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["best.pt", "last.pt"]


WRITE_UNDER_A_UMASK = """
import os, sys
from pathlib import Path
os.umask(int(sys.argv[2], 8))
from spacy_elmo.io.staging import write_atomically
from spacy_elmo.training.checkpoint import load_trained_model, save_trained_model
out = Path(sys.argv[3])
save_trained_model(*load_trained_model(sys.argv[1]), out / "model", {"step": 1})
write_atomically(out / "last.pt", lambda handle: handle.write(b"checkpoint"))
"""


@pytest.mark.parametrize("umask,file_mode,folder_mode", [("022", 0o644, 0o755), ("077", 0o600, 0o700), ("002", 0o664, 0o775)])
def test_checkpoints_and_models_get_the_modes_the_umask_gives_other_files(trained, tmp_path, umask, file_mode, folder_mode):
    command = [sys.executable, "-c", WRITE_UNDER_A_UMASK, str(trained / "model-best"), umask, str(tmp_path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "last.pt").stat().st_mode & 0o777 == file_mode
    assert (tmp_path / "model").stat().st_mode & 0o777 == folder_mode


@needs_proc
def test_a_model_directory_is_flushed_to_disk_before_it_is_renamed_into_place(toy_corpus, tmp_path, monkeypatch):
    """A power cut after the swap finds whole files in model-best/, not empty ones."""
    pretrain(config_for(toy_corpus, max_steps=1, eval_every=1, checkpoint_every=1), tmp_path / "run", progress_bar=False)
    objective, vocab = load_trained_model(tmp_path / "run" / "model-best")
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(staging_module.os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or real_fsync(fd))
    monkeypatch.setattr(staging_module.os, "replace", lambda a, b: events.append(("replace", str(a), str(b))) or real_replace(a, b))
    save_trained_model(objective, vocab, tmp_path / "model", {"step": 1})
    monkeypatch.undo()
    (swap,) = [i for i, event in enumerate(events) if event[0] == "replace" and event[2] == str(tmp_path / "model")]
    staging = events[swap][1]
    flushed = {event[1] for event in events[:swap] if event[0] == "fsync"}
    assert {f"{staging}/{p.name}" for p in (tmp_path / "model").iterdir()} | {staging} <= flushed
    assert ("fsync", str(tmp_path)) in events[swap:]  # and the rename itself


def test_a_failed_rename_puts_the_previous_model_back(toy_corpus, tmp_path, monkeypatch):
    pretrain(config_for(toy_corpus, max_steps=1, eval_every=1, checkpoint_every=1), tmp_path / "run", progress_bar=False)
    objective, vocab = load_trained_model(tmp_path / "run" / "model-best")
    target = tmp_path / "model"
    save_trained_model(objective, vocab, target, {"step": 1})
    before = folder_bytes(target)
    real_replace = os.replace

    def replace(source, destination):
        if Path(source).name.startswith("model.staging-") and "retired" not in Path(source).name:  # the new one, not the put-back
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real_replace(source, destination)

    monkeypatch.setattr(staging_module.os, "replace", replace)
    with pytest.raises(WriteError, match=f"{target}: could not be written \\(Permission denied\\)"):
        save_trained_model(objective, vocab, target, {"step": 2})
    monkeypatch.undo()
    assert folder_bytes(target) == before and sorted(p.name for p in tmp_path.iterdir()) == ["model", "run"]


@pytest.fixture(scope="module")
def trained(toy_corpus, tmp_path_factory) -> Path:
    """A finished 4-step training with checkpoints/last.pt and best.pt."""
    out = tmp_path_factory.mktemp("trained") / "out"
    pretrain(config_for(toy_corpus, max_steps=4, eval_every=4, checkpoint_every=4), out, progress_bar=False)
    return out


class Payload:
    """Unpickling it creates the folder `marker`."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_the_payload_runs_code_when_unpickled(tmp_path):
    """What the damaged-checkpoint test must not let happen does happen with plain pickle."""
    pickle.loads(pickle.dumps(Payload(str(tmp_path / "marker"))))
    assert (tmp_path / "marker").is_dir()


def spoil_checkpoint(path: Path, kind: str, marker: Path) -> None:
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "text":
        path.write_text("step = 4\n", encoding="utf-8")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "state_dict":
        torch.save(torch.nn.Linear(2, 2).state_dict(), path)
    else:
        torch.save({"format": "spacy-elmo-checkpoint/1", "objective": Payload(str(marker))}, path)


@pytest.mark.parametrize(
    "kind, problem",
    [
        ("truncated", "not a readable checkpoint: cut short or damaged"),
        ("text", "not a readable checkpoint: not a file torch.save writes"),
        ("empty", "not a readable checkpoint: the file is empty"),
        ("state_dict", "not a spacy-elmo-checkpoint/1 checkpoint (a torch file of another kind)"),
        ("pickled_object", "not a readable checkpoint: it holds objects other than tensors and plain values, which are never unpickled"),
    ],
)
def test_a_damaged_or_foreign_last_checkpoint_names_the_file_and_points_to_best(toy_corpus, trained, tmp_path, kind, problem):
    out = tmp_path / "out"
    shutil.copytree(trained, out)
    last, best = out / "checkpoints" / "last.pt", out / "checkpoints" / "best.pt"
    spoil_checkpoint(last, kind, tmp_path / "marker")
    config = config_for(toy_corpus, max_steps=6, eval_every=4, checkpoint_every=4)
    for auto_resume in (False, True):  # auto-resume refuses too: starting afresh would delete best.pt
        with pytest.raises(ModelFileError) as caught:
            pretrain(config, out, resume=not auto_resume, auto_resume=auto_resume, progress_bar=False)
        message = str(caught.value)
        assert message.startswith(f"{last}: {problem}") and "\n" not in message
        assert message.endswith(f"; {best} holds the state at the best dev perplexity: copy it over {last} to resume from there")
    assert not (tmp_path / "marker").exists()
    assert folder_bytes(out / "model-best") == folder_bytes(trained / "model-best") and best.read_bytes() == (trained / "checkpoints" / "best.pt").read_bytes()
    shutil.copyfile(best, last)
    assert pretrain(config, out, resume=True, progress_bar=False).step == 6


def test_without_best_pt_the_error_says_so(toy_corpus, trained, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(trained, out)
    (out / "checkpoints" / "best.pt").unlink()
    (out / "checkpoints" / "last.pt").write_text("oops", encoding="utf-8")
    with pytest.raises(ModelFileError, match="there is no .*best.pt to fall back on: --overwrite starts afresh"):
        pretrain(config_for(toy_corpus, max_steps=4), out, resume=True, progress_bar=False)


def test_resume_removes_the_staging_leftovers_of_a_killed_run(toy_corpus, trained, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(trained, out)
    model_last = folder_bytes(out / "model-last")
    (out / "checkpoints" / ".last.pt.staging-k1ll3d").write_bytes(b"PK half a checkpoint")
    (out / "model-best.staging-k1ll3d").mkdir()
    (out / "model-best.staging-k1ll3d" / "weights.npz").write_bytes(b"half")
    os.replace(out / "model-last", out / "model-last.staging-retired-k1ll3d")  # killed between the two renames
    pretrain(config_for(toy_corpus, max_steps=4, eval_every=4, checkpoint_every=4), out, resume=True, progress_bar=False)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "metrics.jsonl", "model-best", "model-last", "pretrain.cfg"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["best.pt", "last.pt"]
    assert folder_bytes(out / "model-last") == model_last


def test_resume_and_overwrite_keep_the_users_own_files_beside_the_outputs(toy_corpus, trained, tmp_path):
    """Backups named like the outputs (a copy of last.pt, a packed model-best) are not
    staging leftovers: neither a resume nor --overwrite removes them."""
    out = tmp_path / "out"
    shutil.copytree(trained, out)
    own = [out / "checkpoints" / "last.pt.bak", out / "checkpoints" / "best.pt.copy", out / "model-best.tar.gz", out / "model-last.notes"]
    for path in own:
        path.write_bytes(b"mine")
    pretrain(config_for(toy_corpus, max_steps=4, eval_every=4, checkpoint_every=4), out, resume=True, progress_bar=False)
    assert all(path.read_bytes() == b"mine" for path in own)
    pretrain(config_for(toy_corpus, max_steps=2), out, overwrite=True, progress_bar=False)
    assert [path.read_bytes() for path in own[2:]] == [b"mine", b"mine"]  # checkpoints/ itself is a training output
    outputs = ["checkpoints", "metrics.jsonl", "model-best", "model-last", "pretrain.cfg"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*outputs, "model-best.tar.gz", "model-last.notes"])
