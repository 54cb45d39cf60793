"""Pretraining across processes: a SIGKILLed or Ctrl-C'd run resumes exactly, also under
torchrun, and a 2-process torchrun run takes the same steps as a single process."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy
import pytest
import torch

from elmo_testing import REPO, metric_records, saved_weights, write_tiny_pretrain_config
from spacy_elmo.training.config import load_config
from spacy_elmo.training.trainer import pretrain

SAMPLED = {"head.type": "sampled", "head.n_samples": 5}


def run_cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "spacy_elmo", *map(str, args)], cwd=REPO, capture_output=True, text=True, **kwargs)


def torchrun(*args, script=None):
    """The command line of a 2-process CPU torchrun of `python -m spacy_elmo ARGS`, or of
    `python SCRIPT ARGS`."""
    target = [str(script)] if script else ["-m", "spacy_elmo"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *target, *map(str, args)]


ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def last_logged_step(output_dir):
    try:
        lines = (output_dir / "metrics.jsonl").read_text().splitlines()
        return max(json.loads(line)["step"] for line in lines[:-1]) if len(lines) > 1 else 0
    except (FileNotFoundError, ValueError):
        return 0


def test_a_run_killed_between_checkpoints_resumes_to_the_same_weights(toy_corpus, tmp_path):
    config = write_tiny_pretrain_config(tmp_path / "tiny.cfg", toy_corpus, SAMPLED, max_steps=60, dropout=0.2, eval_every=10, checkpoint_every=10)
    straight = run_cli("pretrain", config, tmp_path / "straight", "--no-progress")
    assert straight.returncode == 0, straight.stderr

    killed_dir = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "spacy_elmo", "pretrain", str(config), str(killed_dir), "--no-progress"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while last_logged_step(killed_dir) < 15 and time.time() < deadline and process.poll() is None:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    checkpoint_step = json.loads((killed_dir / "model-last" / "training.json").read_text())["step"]
    assert 10 <= checkpoint_step < 60

    resumed = run_cli("pretrain", config, killed_dir, "--no-progress", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    expected, actual = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(killed_dir / "model-last")
    assert all(numpy.array_equal(expected[name], actual[name]) for name in expected)
    steps = [r["step"] for r in metric_records(killed_dir) if "loss" in r]
    assert steps == list(range(1, 61))  # records written after the checkpoint by the killed run were dropped


def staging_leftovers(output_dir):
    """Half-written checkpoint files and model folders a killed run left behind."""
    patterns = ["checkpoints/.last.pt.staging-*", "checkpoints/.best.pt.staging-*", "model-*.staging-*"]
    return [path for pattern in patterns for path in output_dir.glob(pattern)]


def test_ten_kills_at_random_moments_each_resumed_end_with_the_uninterrupted_weights(toy_corpus, tmp_path):
    """SIGKILL at seeded random moments of the training (checkpoints every 2 steps and an
    evaluation every 3, so many kills land in a write or an evaluation), `--auto-resume`
    after each: the weights and the loss curve equal an uninterrupted run's."""
    config = write_tiny_pretrain_config(tmp_path / "tiny.cfg", toy_corpus, SAMPLED, max_steps=80, dropout=0.2, eval_every=3, checkpoint_every=2)
    straight = run_cli("pretrain", config, tmp_path / "straight", "--no-progress", env=ONE_THREAD)
    assert straight.returncode == 0, straight.stderr

    # Each kill comes within three steps' time of the first step its life logs, so ten lives
    # cover well under 80 steps on a machine of any speed.
    last_log = [r for r in metric_records(tmp_path / "straight") if "loss" in r][-1]
    step_seconds = last_log["elapsed_seconds"] / last_log["step"]
    run_dir, delays, kills, caught_writing = tmp_path / "killed", random.Random(0), 0, 0
    command = [sys.executable, "-m", "spacy_elmo", "pretrain", str(config), str(run_dir), "--no-progress", "--auto-resume"]
    deadline = time.time() + 600
    while kills < 10 and time.time() < deadline:
        process = subprocess.Popen(command, cwd=REPO, env=ONE_THREAD, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        start_step = last_logged_step(run_dir)
        while last_logged_step(run_dir) <= start_step and process.poll() is None:
            time.sleep(0.002)
        time.sleep(delays.uniform(0.0, 3 * step_seconds))
        process.send_signal(signal.SIGKILL)
        _, errors = process.communicate()
        if process.returncode != -signal.SIGKILL:
            assert process.returncode == 0, errors[-3000:]
            break
        kills += 1
        caught_writing += bool(staging_leftovers(run_dir))
    assert kills >= 10, f"only {kills} kills before the run finished or the deadline"
    resumed = run_cli("pretrain", config, run_dir, "--no-progress", "--auto-resume", env=ONE_THREAD)
    assert resumed.returncode == 0, resumed.stderr
    assert not staging_leftovers(run_dir)
    expected, actual = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(run_dir / "model-last")
    assert all(numpy.array_equal(expected[name], actual[name]) for name in expected), f"{kills} kills, {caught_writing} during a write"
    records = [r for r in metric_records(run_dir) if "loss" in r]
    assert [r["step"] for r in records] == list(range(1, 81))
    assert [r["loss"] for r in records] == [r["loss"] for r in metric_records(tmp_path / "straight") if "loss" in r]


@pytest.mark.parametrize("tokens_per_batch", [256, 8])  # with 8, every batch is one sentence: rank 1 gets none
def test_two_gloo_processes_take_the_same_steps_as_one(toy_corpus, tmp_path, tokens_per_batch):
    extra = {"batching.tokens_per_batch": tokens_per_batch, "batching.max_sentence_tokens": 8}
    config_path = write_tiny_pretrain_config(tmp_path / "tiny.cfg", toy_corpus, extra, max_steps=8, dropout=0.0, eval_every=4, checkpoint_every=4)
    pretrain(load_config(config_path), tmp_path / "single", progress_bar=False)
    launch = torchrun("pretrain", config_path, tmp_path / "double", "--no-progress")
    result = subprocess.run(launch, cwd=REPO, capture_output=True, text=True, env=ONE_THREAD, timeout=300)
    assert result.returncode == 0, result.stderr[-10000:]
    assert len(torch.load(tmp_path / "double" / "checkpoints" / "last.pt", weights_only=True)["rng"]) == 2
    single = [r for r in metric_records(tmp_path / "single") if "loss" in r]
    double = [r for r in metric_records(tmp_path / "double") if "loss" in r]
    assert [(r["step"], r["tokens"]) for r in single] == [(r["step"], r["tokens"]) for r in double]
    assert numpy.allclose([r["loss"] for r in single], [r["loss"] for r in double], rtol=1e-5)
    expected, actual = saved_weights(tmp_path / "single" / "model-last"), saved_weights(tmp_path / "double" / "model-last")
    assert max(float(numpy.abs(expected[n] - actual[n]).max()) for n in expected) < 1e-5
    dev = [[r["dev_mean"] for r in metric_records(tmp_path / name) if "dev_mean" in r] for name in ("single", "double")]
    assert numpy.allclose(dev[0], dev[1], rtol=1e-5)


USER_SCRIPT = """
import gc, os, sys
import spacy_elmo.training.trainer as trainer
from spacy_elmo.training.config import load_config
from torch.nn.parallel import DistributedDataParallel

leave_group = trainer.stop_process


def stop_process(process):
    alive = sum(isinstance(item, DistributedDataParallel) for item in gc.get_objects())
    print(f"rank {os.environ['RANK']}: {alive} DDP alive when leaving the process group", flush=True)
    leave_group(process)


trainer.stop_process = stop_process
progress = trainer.pretrain(load_config(sys.argv[1]), sys.argv[2], progress_bar=False)
print(f"rank {os.environ['RANK']}: trained {progress.step} steps", flush=True)
"""


def test_a_script_calling_pretrain_under_torchrun_lets_go_of_ddp_before_the_process_group(toy_corpus, tmp_path):
    # A DDP (its reducer) that outlives the destroyed gloo group made 6 of 40 such scripts
    # abort at exit ("terminate called without an active exception"; 0 of 80 without it,
    # GIL switch interval 0.5 s on a loaded machine).
    config_path = write_tiny_pretrain_config(tmp_path / "tiny.cfg", toy_corpus, SAMPLED, max_steps=4, eval_every=2, checkpoint_every=2)
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT)
    result = subprocess.run(torchrun(config_path, tmp_path / "run", script=script), cwd=REPO, capture_output=True, text=True, env=ONE_THREAD, timeout=300)
    assert result.returncode == 0, result.stderr[-10000:]
    for rank in (0, 1):
        assert f"rank {rank}: 0 DDP alive when leaving the process group" in result.stdout
        assert f"rank {rank}: trained 4 steps" in result.stdout


def test_ctrl_c_stops_at_a_step_boundary_with_a_checkpoint_and_resumes_exactly(toy_corpus, tmp_path):
    config = write_tiny_pretrain_config(tmp_path / "tiny.cfg", toy_corpus, SAMPLED, max_steps=60, dropout=0.2, eval_every=50, checkpoint_every=50)
    straight = run_cli("pretrain", config, tmp_path / "straight", "--no-progress")
    assert straight.returncode == 0, straight.stderr
    stopped_dir = tmp_path / "stopped"
    command = [sys.executable, "-m", "spacy_elmo", "pretrain", str(config), str(stopped_dir), "--no-progress", "--training.eval_every", "50"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while last_logged_step(stopped_dir) < 8 and time.time() < deadline and process.poll() is None:
        time.sleep(0.005)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    assert "--training.eval_every 50 --resume" in stderr  # the hint repeats the overrides
    stopped_at = torch.load(stopped_dir / "checkpoints" / "last.pt", weights_only=True)["progress"]["step"]
    assert 8 <= stopped_at < 50  # a checkpoint at the interruption, not a periodic one
    resumed = run_cli("pretrain", config, stopped_dir, "--no-progress", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    expected, actual = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(stopped_dir / "model-last")
    assert all(numpy.array_equal(expected[name], actual[name]) for name in expected)


def test_ctrl_c_under_torchrun_stops_every_process_at_one_step_and_resumes(toy_corpus, tmp_path):
    """A terminal's Ctrl-C reaches the agent only (workers run in sessions of their own),
    and the agent passes it on to every worker. The reference is an uninterrupted run of
    as many processes: over 60 steps, a single process's weights differ from two processes'
    by up to 1e-3 (the other order of the gradient sums, amplified, presumably through a
    max-pool's or ReLU's choice)."""
    config = write_tiny_pretrain_config(tmp_path / "tiny.cfg", toy_corpus, {}, max_steps=60, dropout=0.0, eval_every=50, checkpoint_every=50)
    launch = torchrun("pretrain", config, tmp_path / "straight", "--no-progress")
    straight = subprocess.run(launch, cwd=REPO, capture_output=True, text=True, env=ONE_THREAD, timeout=300)
    assert straight.returncode == 0, straight.stderr[-10000:]
    stopped_dir = tmp_path / "stopped"
    process = subprocess.Popen(
        torchrun("pretrain", config, stopped_dir, "--no-progress"),
        cwd=REPO,
        env=ONE_THREAD,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while last_logged_step(stopped_dir) < 8 and time.time() < deadline and process.poll() is None:
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0, "the run ended before it could be stopped"
    assert "--resume" in stderr, stderr[-10000:]
    stopped_at = torch.load(stopped_dir / "checkpoints" / "last.pt", weights_only=True)["progress"]["step"]
    assert 8 <= stopped_at < 50, stderr[-10000:]  # the interruption's checkpoint, not a periodic one
    resumed = subprocess.run(
        torchrun("pretrain", config, stopped_dir, "--no-progress", "--resume"), cwd=REPO, capture_output=True, text=True, env=ONE_THREAD, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-10000:]
    assert [r["step"] for r in metric_records(stopped_dir) if "loss" in r] == [r["step"] for r in metric_records(tmp_path / "straight") if "loss" in r]
    expected, actual = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(stopped_dir / "model-last")
    assert max(float(numpy.abs(expected[n] - actual[n]).max()) for n in expected) < 1e-6
