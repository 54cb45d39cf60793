"""The pretraining loop: it learns, reports exact perplexity, checkpoints and resumes exactly."""

import json
import math
import os
import shutil
import signal

import numpy
import pytest
import torch

from elmo_testing import DEMO_PRETRAIN_CONFIG, golden_dir, metric_records, saved_weights, tiny_pretrain_overrides
from spacy_elmo.io import ModelFileError, load_model
from spacy_elmo.nn.precision import bf16_is_fast
from spacy_elmo.nn.special_tokens import BOS_ID, EOS_ID
from spacy_elmo.training.checkpoint import load_checkpoint, load_trained_model
from spacy_elmo.training.config import load_config
from spacy_elmo.training.data import BatchStream, read_sentences, to_tensors, train_shards
from spacy_elmo.training.perplexity import at_vocabulary, perplexity
from spacy_elmo.training.signals import StopRequest
from spacy_elmo.training.trainer import pretrain


def config_for(corpus, **training):
    return load_config(DEMO_PRETRAIN_CONFIG, tiny_pretrain_overrides(corpus, **training))


def with_overrides(corpus, extra, **training):
    return load_config(DEMO_PRETRAIN_CONFIG, {**tiny_pretrain_overrides(corpus, **training), **extra})


def test_a_tiny_model_trains_and_its_dev_perplexity_falls(toy_corpus, tmp_path):
    done = pretrain(config_for(toy_corpus), tmp_path / "out", progress_bar=False)
    assert done.step == 30 and done.tokens > 0
    dev = [r["dev_mean"] for r in metric_records(tmp_path / "out") if "dev_mean" in r]
    assert len(dev) == 3 and dev[0] > dev[1] > dev[2] and dev[2] < 0.8 * dev[0]
    train = [r for r in metric_records(tmp_path / "out") if "loss" in r]
    assert [r["step"] for r in train] == list(range(1, 31))
    assert train[-1]["loss"] < train[0]["loss"] and train[0]["tokens_per_second"] > 0
    info = json.loads((tmp_path / "out" / "model-best" / "training.json").read_text())
    assert info["dev_mean"] == pytest.approx(min(dev)) and info["step"] == done.best_step
    assert load_model(tmp_path / "out" / "model-last").config.projection_dim == 8


def exact_perplexity(model_dir, sentences):
    """The mean perplexity, computed sentence by sentence from the full softmax."""
    objective, vocab = load_trained_model(model_dir)
    nll, predictions = 0.0, 0
    with torch.no_grad():
        for sentence in sentences:
            batch = to_tensors([sentence], vocab, objective.bilm)
            forward_top, backward_top = objective.bilm.top_states(batch.input_ids, batch.lengths)
            framed = [BOS_ID] + vocab.ids(sentence) + [EOS_ID]
            forward = objective.head.log_probs(forward_top[0])
            backward = objective.head.log_probs(backward_top[0])
            for j in range(len(framed) - 1):
                nll -= float(forward[j, framed[j + 1]]) + float(backward[j + 1, framed[j]])
            predictions += 2 * (len(framed) - 1)
    return math.exp(nll / predictions)


def test_sampled_softmax_training_reports_exact_perplexity(toy_corpus, tmp_path):
    config = with_overrides(toy_corpus, {"head.type": "sampled", "head.n_samples": 5}, max_steps=20, eval_every=20)
    pretrain(config, tmp_path / "out", progress_bar=False)
    reported = [r for r in metric_records(tmp_path / "out") if "dev_mean" in r][-1]
    dev = read_sentences(toy_corpus / "dev.txt", 64)
    assert reported["dev_mean"] == pytest.approx(exact_perplexity(tmp_path / "out" / "model-best", dev), rel=1e-5)
    assert reported["dev_mean"] == pytest.approx(math.sqrt(reported["dev_forward"] * reported["dev_backward"]), rel=1e-9)


def test_checkpoints_hold_the_full_state_and_load_without_unpickling(toy_corpus, tmp_path):
    pretrain(config_for(toy_corpus, max_steps=10), tmp_path / "out", progress_bar=False)
    path = tmp_path / "out" / "checkpoints" / "last.pt"
    raw = torch.load(path, weights_only=True)
    assert raw["progress"]["step"] == 10 and len(raw["rng"]) == 1
    assert raw["optimizer"]["state"] and "head.weight" in raw["objective"]
    assert load_checkpoint(tmp_path / "out" / "checkpoints" / "best.pt")["progress"]["best_step"] == 10
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ModelFileError, match="not a readable checkpoint"):
        load_checkpoint(path)


def test_resuming_with_a_larger_budget_equals_one_longer_run(toy_corpus, tmp_path):
    extra = {"head.type": "sampled", "head.n_samples": 5}  # sampling and dropout use the RNG
    pretrain(with_overrides(toy_corpus, extra, max_steps=24, dropout=0.2), tmp_path / "straight", progress_bar=False)
    pretrain(with_overrides(toy_corpus, extra, max_steps=13, dropout=0.2), tmp_path / "resumed", progress_bar=False)
    pretrain(with_overrides(toy_corpus, extra, max_steps=24, dropout=0.2), tmp_path / "resumed", resume=True, progress_bar=False)
    straight, resumed = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(tmp_path / "resumed" / "model-last")
    assert all(numpy.array_equal(straight[name], resumed[name]) for name in straight)
    losses = [[(r["step"], r["loss"]) for r in metric_records(tmp_path / name) if "loss" in r] for name in ("straight", "resumed")]
    assert losses[0] == losses[1] and len(losses[0]) == 24


def test_last_pt_holds_the_best_of_an_evaluation_at_the_end_that_follows_its_checkpoint(toy_corpus, tmp_path):
    pretrain(config_for(toy_corpus, max_steps=20, eval_every=15, checkpoint_every=10), tmp_path / "out", progress_bar=False)
    dev = [(r["step"], r["dev_mean"]) for r in metric_records(tmp_path / "out") if "dev_mean" in r]
    assert [step for step, _ in dev] == [15, 20]
    progress = load_checkpoint(tmp_path / "out" / "checkpoints" / "last.pt")["progress"]
    best_step, best = min(dev, key=lambda record: record[1])
    assert (progress["step"], progress["evaluated_step"]) == (20, 20)
    assert (progress["best_step"], progress["best_dev_perplexity"]) == (best_step, best)


def test_a_bad_or_overwritten_init_model_never_costs_the_training_in_the_folder(toy_corpus, tmp_path):
    out = tmp_path / "out"
    pretrain(config_for(toy_corpus, max_steps=2), out, progress_bar=False)
    before = sorted(path.name for path in out.iterdir())

    def adapt(init_from):
        return with_overrides(toy_corpus, {"paths.init_from": str(init_from)}, max_steps=2)

    with pytest.raises(ValueError, match="paths.init_from .* lies in .*model-best, which this training writes: copy the model elsewhere first"):
        pretrain(adapt(out / "model-best"), out, overwrite=True, progress_bar=False)
    shutil.copytree(out / "model-best", tmp_path / "damaged")
    (tmp_path / "damaged" / "weights.npz").write_bytes((out / "model-best" / "weights.npz").read_bytes()[:100])
    with pytest.raises(ModelFileError, match="damaged/weights.npz: not a readable weight archive"):
        pretrain(adapt(tmp_path / "damaged"), out, overwrite=True, progress_bar=False)
    assert sorted(path.name for path in out.iterdir()) == before and (out / "model-best" / "weights.npz").is_file()


def test_a_run_stopped_before_its_first_last_pt_resumes_from_best_pt_exactly(toy_corpus, tmp_path, caplog):
    caplog.set_level("INFO")
    pretrain(config_for(toy_corpus, max_steps=6, eval_every=2, checkpoint_every=50), tmp_path / "straight", progress_bar=False)
    pretrain(config_for(toy_corpus, max_steps=4, eval_every=2, checkpoint_every=50), tmp_path / "cut", progress_bar=False)
    assert load_checkpoint(tmp_path / "cut" / "checkpoints" / "best.pt")["progress"]["step"] == 4
    (tmp_path / "cut" / "checkpoints" / "last.pt").unlink()  # as a kill between the two writes leaves it
    shutil.rmtree(tmp_path / "cut" / "model-last")
    first_steps = (tmp_path / "cut" / "metrics.jsonl").read_text()  # their timings differ from any new run's
    done = pretrain(config_for(toy_corpus, max_steps=6, eval_every=2, checkpoint_every=50), tmp_path / "cut", auto_resume=True, progress_bar=False)
    assert done.step == 6 and [r["step"] for r in metric_records(tmp_path / "cut") if "loss" in r] == list(range(1, 7))
    assert (tmp_path / "cut" / "metrics.jsonl").read_text().startswith(first_steps)
    assert f"resuming the training in {tmp_path / 'cut'} at step 4" in caplog.text
    straight, resumed = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(tmp_path / "cut" / "model-last")
    assert all(numpy.array_equal(straight[name], resumed[name]) for name in straight)


def test_a_training_is_not_overwritten_or_resumed_with_another_config(toy_corpus, tmp_path):
    pretrain(config_for(toy_corpus, max_steps=2), tmp_path / "out", progress_bar=False)
    with pytest.raises(ValueError, match="--resume"):
        pretrain(config_for(toy_corpus, max_steps=2), tmp_path / "out", progress_bar=False)
    with pytest.raises(ValueError, match="cannot resume: \\[training\\] dropout"):
        pretrain(config_for(toy_corpus, max_steps=4, dropout=0.3), tmp_path / "out", resume=True, progress_bar=False)
    with pytest.raises(ModelFileError, match="checkpoint not found"):
        pretrain(config_for(toy_corpus), tmp_path / "fresh", resume=True, progress_bar=False)


def test_an_epoch_budget_stops_at_the_end_of_the_data(toy_corpus, tmp_path):
    done = pretrain(config_for(toy_corpus, max_steps=0, max_epochs=1), tmp_path / "out", progress_bar=False)
    config = config_for(toy_corpus)
    stream = BatchStream(train_shards(toy_corpus), config.batching.tokens_per_batch, config.batching.max_sentence_tokens, config.batching.bucket_batches, 0)
    batches = 0
    while stream.upcoming_epoch() == 0:
        next(stream)
        batches += 1
    assert done.step == batches and done.position.epoch == 0


def test_init_from_starts_from_an_existing_model(toy_corpus, tmp_path, tiny_model_dir):
    config = with_overrides(toy_corpus, {"paths.init_from": str(tiny_model_dir), "optimizer.learning_rate": 1e-9}, max_steps=2, dropout=0.0)
    pretrain(config, tmp_path / "out", progress_bar=False)
    source, trained = saved_weights(tiny_model_dir), saved_weights(tmp_path / "out" / "model-last")
    assert sorted(source) == sorted(trained)
    assert all(numpy.allclose(source[name], trained[name], atol=1e-6) for name in source)


def test_init_from_a_trained_model_keeps_the_softmax_rows_of_shared_words(toy_corpus, tmp_path):
    """Adapting a biLM to new text: the words both vocabularies hold keep their trained rows."""
    from spacy_elmo.io import load_lm_head
    from spacy_elmo.training.data import Vocabulary

    pretrain(config_for(toy_corpus, max_steps=3), tmp_path / "first", progress_bar=False)
    source = tmp_path / "first" / "model-last"
    old_vocab = Vocabulary.from_file(source / "vocab.txt")
    shuffled = tmp_path / "corpus"
    shutil.copytree(toy_corpus, shuffled)
    new_tokens = [*old_vocab.tokens[:3], "unseen-word", *reversed(old_vocab.tokens[3:])]
    (shuffled / "vocab.txt").write_text("".join(t + "\n" for t in new_tokens), encoding="utf-8")
    config = with_overrides(shuffled, {"paths.init_from": str(source), "optimizer.learning_rate": 1e-9}, max_steps=1, dropout=0.0)
    pretrain(config, tmp_path / "second", progress_bar=False)
    old_weight, old_bias = load_lm_head(source)
    new_weight, new_bias = load_lm_head(tmp_path / "second" / "model-last")
    for new_id, token in enumerate(new_tokens):
        if token in old_vocab.index:
            numpy.testing.assert_allclose(new_weight[new_id], old_weight[old_vocab.index[token]], atol=1e-6)
            if token != "<UNK>":  # which shares its probability with the new word (the next test)
                assert abs(float(new_bias[new_id] - old_bias[old_vocab.index[token]])) < 1e-6
    numpy.testing.assert_allclose(new_weight[3], old_weight[2], atol=1e-6)  # the new word starts from <UNK>'s row


def test_words_added_at_init_from_share_the_source_unk_probability_by_their_counts(toy_corpus, tmp_path, caplog):
    """A vocabulary extended for adaptation: the head starts out predicting what the source
    predicted, `<UNK>`'s probability split among the added words by their training counts
    and the words still unknown."""
    from spacy_elmo.io import load_lm_head
    from spacy_elmo.training.data import Vocabulary

    def corpus_with_vocab(name, tokens):
        folder = tmp_path / name
        shutil.copytree(toy_corpus, folder)
        (folder / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
        return folder

    full = Vocabulary.from_file(toy_corpus / "vocab.txt").tokens
    kept, added, still_unknown = full[:-5], full[-5:-1], full[-1]  # the source lacks five words, the new vocabulary one
    pretrain(config_for(corpus_with_vocab("small", kept), max_steps=3), tmp_path / "source", progress_bar=False)
    source = tmp_path / "source" / "model-last"
    extended_corpus = corpus_with_vocab("extended-corpus", kept + added)
    config = with_overrides(extended_corpus, {"paths.init_from": str(source), "optimizer.learning_rate": 1e-9}, max_steps=1, dropout=0.0)
    pretrain(config, tmp_path / "extended", progress_bar=False)

    tokens = [token for shard in train_shards(toy_corpus) for token in shard.read_text(encoding="utf-8").split()]
    unknown = [token for token in tokens if token not in kept]
    assert still_unknown in unknown and all(word in unknown for word in added)
    total = len(unknown) + len(added) + 1
    old_weight, old_bias = (torch.as_tensor(a) for a in load_lm_head(source))
    new_weight, new_bias = (torch.as_tensor(a) for a in load_lm_head(tmp_path / "extended" / "model-last"))
    hidden = torch.randn(7, old_weight.shape[1])
    old_p = torch.softmax(hidden @ old_weight.T + old_bias, dim=-1)
    new_p = torch.softmax(hidden @ new_weight.T + new_bias, dim=-1)
    others = [i for i in range(len(kept)) if i != 2]  # <S>, </S> and every kept word
    torch.testing.assert_close(new_p[:, others], old_p[:, others], atol=1e-6, rtol=1e-4)
    for i, word in enumerate(added):
        torch.testing.assert_close(new_p[:, len(kept) + i], old_p[:, 2] * (unknown.count(word) + 1) / total, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(new_p[:, 2], old_p[:, 2] * (unknown.count(still_unknown) + 1) / total, atol=1e-6, rtol=1e-4)
    # scored at the source's vocabulary, the extended model starts at the source's perplexity
    sentences = read_sentences(toy_corpus / "dev.txt", 64)
    source_model, source_vocab = load_trained_model(source)
    extended_model, extended_vocab = load_trained_model(tmp_path / "extended" / "model-last")
    before = perplexity(source_model, sentences, source_vocab)
    after = perplexity(at_vocabulary(extended_model, extended_vocab, source_vocab), sentences, source_vocab)
    assert after.mean == pytest.approx(before.mean, rel=1e-4) and after.forward == pytest.approx(before.forward, rel=1e-4)

    narrower = with_overrides(corpus_with_vocab("narrower", kept[:-1]), {"paths.init_from": str(source)}, max_steps=1)
    with caplog.at_level("WARNING"):
        pretrain(narrower, tmp_path / "narrower", progress_bar=False)
    assert f"the vocabulary lacks 1 of the {len(kept)} words of {source}: their probability goes to no row" in caplog.text


def test_a_log_uniform_bias_starts_a_fresh_head_at_the_zipf_distribution_and_init_from_keeps_trained_rows(toy_corpus, tmp_path):
    from spacy_elmo.io import load_lm_head
    from spacy_elmo.nn.softmax import log_uniform_probabilities

    extra = {"head.bias_init": "log_uniform", "optimizer.learning_rate": 1e-9}
    pretrain(with_overrides(toy_corpus, extra, max_steps=1), tmp_path / "fresh", progress_bar=False)
    _, bias = load_lm_head(tmp_path / "fresh" / "model-last")
    numpy.testing.assert_allclose(bias, torch.log(log_uniform_probabilities(len(bias))).numpy(), atol=1e-5)
    zeros = {"head.bias_init": "zeros", "optimizer.learning_rate": 1e-9}
    pretrain(with_overrides(toy_corpus, zeros, max_steps=1), tmp_path / "zeros", progress_bar=False)
    assert numpy.allclose(load_lm_head(tmp_path / "zeros" / "model-last")[1], 0.0, atol=1e-5)
    trained = tmp_path / "trained"  # a head started at zeros: a log-uniform start would miss it by |log P|
    pretrain(with_overrides(toy_corpus, {"head.bias_init": "zeros"}, max_steps=3), trained, progress_bar=False)
    adapted = with_overrides(toy_corpus, {**extra, "paths.init_from": str(trained / "model-last")}, max_steps=1, dropout=0.0)
    pretrain(adapted, tmp_path / "adapted", progress_bar=False)
    numpy.testing.assert_allclose(load_lm_head(tmp_path / "adapted" / "model-last")[1], load_lm_head(trained / "model-last")[1], atol=1e-6)


def test_init_from_public_weights(toy_corpus, tmp_path):
    public = golden_dir("allennlp")
    config = with_overrides(
        toy_corpus,
        {"paths.init_from": str(public / "lm_weights.hdf5"), "paths.init_options": str(public / "options.json")},
        max_steps=2,
    )
    pretrain(config, tmp_path / "out", progress_bar=False)
    trained = load_model(tmp_path / "out" / "model-last")
    assert trained.config.lstm_dim != 16  # the shape came from the public model, not [model]
    missing_options = with_overrides(toy_corpus, {"paths.init_from": str(public / "lm_weights.hdf5")}, max_steps=2)
    with pytest.raises(ValueError, match="set 'paths.init_options' to its options.json"):
        pretrain(missing_options, tmp_path / "other", progress_bar=False)
    needless_options = with_overrides(
        toy_corpus,
        {"paths.init_from": str(tmp_path / "out" / "model-last"), "paths.init_options": str(public / "options.json")},
        max_steps=2,
    )
    with pytest.raises(ValueError, match="'paths.init_options' is only used with a public .hdf5 file"):
        pretrain(needless_options, tmp_path / "other", progress_bar=False)


@pytest.mark.parametrize("decay_start", [0.0, 0.5])
def test_a_linear_decay_over_seconds_lowers_the_rate_with_the_clock(toy_corpus, tmp_path, decay_start):
    overrides = {"schedule.decay": "linear", "schedule.horizon": "seconds", "schedule.decay_start": decay_start}
    config = with_overrides(toy_corpus, overrides, max_steps=0, max_seconds=2.0, eval_every=10_000, checkpoint_every=10_000)
    pretrain(config, tmp_path / "out", progress_bar=False)
    logged = [(r["elapsed_seconds"], r["learning_rate"]) for r in metric_records(tmp_path / "out") if "learning_rate" in r]
    rates = [rate for _, rate in logged]
    assert len(rates) > 3 and rates == sorted(rates, reverse=True) and rates[0] > rates[-1]

    def rate_at(seconds: float) -> float:
        return 0.01 * (1 - min(max((seconds / 2.0 - decay_start) / (1 - decay_start), 0.0), 1.0))

    # a step's rate is set from the clock when it starts: after the previous line, before its own
    for (before, _), (after, rate) in zip(logged, logged[1:]):
        assert rate_at(after) - 1e-12 <= rate <= rate_at(before) + 1e-12
    first_half = [rate for seconds, rate in logged if seconds < 1.0]
    assert len(first_half) > 1
    if decay_start == 0.5:
        assert first_half == [0.01] * len(first_half)  # held for the first half of the budget
    else:
        assert first_half[-1] < 0.01


def test_resume_refuses_a_changed_corpus_or_a_moved_linear_schedule(toy_corpus, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(toy_corpus, corpus)
    linear = {"schedule.decay": "linear", "schedule.horizon": "steps"}
    pretrain(with_overrides(corpus, linear, max_steps=3), tmp_path / "out", progress_bar=False)
    with pytest.raises(ValueError, match="cannot resume: \\[training\\] max_steps was 3, is now 6"):
        pretrain(with_overrides(corpus, linear, max_steps=6), tmp_path / "out", resume=True, progress_bar=False)
    with (corpus / "vocab.txt").open("a", encoding="utf-8") as out:
        out.write("newword\n")
    with pytest.raises(ValueError, match="the corpus changed since the checkpoint \\(vocab_sha256 differs\\)"):
        pretrain(with_overrides(corpus, linear, max_steps=3), tmp_path / "out", resume=True, progress_bar=False)


def test_a_fresh_run_refuses_leftovers_and_overwrite_clears_them(toy_corpus, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 9, "loss": 1.0}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="already holds a training"):
        pretrain(config_for(toy_corpus, max_steps=2), out, progress_bar=False)
    (out / "model-best.staging-retired-k1ll3d").mkdir()  # a swap cut between its renames
    (out / "model-best.old").mkdir()  # the user's own
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    pretrain(config_for(toy_corpus, max_steps=2), out, overwrite=True, progress_bar=False)
    assert [r["step"] for r in metric_records(out) if "loss" in r] == [1, 2]
    assert not (out / "model-best.staging-retired-k1ll3d").exists() and (out / "notes.txt").read_text() == "mine"
    assert (out / "model-best.old").is_dir()
    assert (out / "pretrain.cfg").is_file()


def test_without_a_dev_set_model_best_is_the_last_model(toy_corpus, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(toy_corpus, corpus)
    (corpus / "dev.txt").write_text("", encoding="utf-8")
    done = pretrain(config_for(corpus, max_steps=4, eval_every=2), tmp_path / "out", progress_bar=False)
    assert done.best_dev_perplexity is None
    best, last = saved_weights(tmp_path / "out" / "model-best"), saved_weights(tmp_path / "out" / "model-last")
    assert all(numpy.array_equal(best[name], last[name]) for name in best)


def test_auto_resume_continues_a_fitting_training_and_replaces_any_other(toy_corpus, tmp_path):
    pretrain(config_for(toy_corpus, max_steps=12), tmp_path / "straight", progress_bar=False)
    pretrain(config_for(toy_corpus, max_steps=7), tmp_path / "auto", progress_bar=False)
    pretrain(config_for(toy_corpus, max_steps=12), tmp_path / "auto", auto_resume=True, progress_bar=False)
    straight, resumed = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(tmp_path / "auto" / "model-last")
    assert all(numpy.array_equal(straight[name], resumed[name]) for name in straight)
    before = (tmp_path / "auto" / "metrics.jsonl").read_text()
    pretrain(config_for(toy_corpus, max_steps=12), tmp_path / "auto", resume=True, progress_bar=False)
    assert (tmp_path / "auto" / "metrics.jsonl").read_text() == before  # a finished run adds nothing
    done = pretrain(config_for(toy_corpus, max_steps=3, dropout=0.3), tmp_path / "auto", auto_resume=True, progress_bar=False)
    assert done.step == 3 and [r["step"] for r in metric_records(tmp_path / "auto") if "loss" in r] == [1, 2, 3]


def test_a_run_from_init_from_resumes_only_from_the_same_init_model(toy_corpus, tmp_path, tiny_model_dir):
    init, out = tmp_path / "init", tmp_path / "out"
    shutil.copytree(tiny_model_dir, init)

    def adapt(max_steps):
        return with_overrides(toy_corpus, {"paths.init_from": str(init)}, max_steps=max_steps)

    pretrain(adapt(2), out, progress_bar=False)
    assert pretrain(adapt(4), out, resume=True, progress_bar=False).step == 4
    shutil.rmtree(init)
    shutil.copytree(out / "model-last", init)  # the base model trained again: other weights at the same path
    with pytest.raises(ValueError, match="cannot resume: the paths.init_from model changed since the checkpoint \\(init_from differs\\)"):
        pretrain(adapt(6), out, resume=True, progress_bar=False)
    done = pretrain(adapt(3), out, auto_resume=True, progress_bar=False)  # starts afresh from the new base
    assert done.step == 3 and [r["step"] for r in metric_records(out) if "loss" in r] == [1, 2, 3]


def test_a_corpus_prepared_again_with_another_seed_is_not_resumed_though_every_size_is_the_same(tmp_path):
    from elmo_testing import write_toy_text
    from spacy_elmo.training.corpus import prepare_corpus

    text, corpus, out = write_toy_text(tmp_path / "toy.txt"), tmp_path / "corpus", tmp_path / "out"
    prepare_corpus(text, corpus, seed=0, dev_fraction=0.0, test_fraction=0.0)
    first = {path.name: path.read_text(encoding="utf-8") for path in train_shards(corpus)}
    pretrain(config_for(corpus, max_steps=2), out, progress_bar=False)
    prepare_corpus(text, corpus, seed=1, dev_fraction=0.0, test_fraction=0.0)
    second = {path.name: path.read_text(encoding="utf-8") for path in train_shards(corpus)}
    assert second != first and {name: len(shard.encode()) for name, shard in second.items()} == {name: len(shard.encode()) for name, shard in first.items()}
    with pytest.raises(ValueError, match="cannot resume: the corpus changed since the checkpoint \\(shard_digests differs\\)"):
        pretrain(config_for(corpus, max_steps=4), out, resume=True, progress_bar=False)
    done = pretrain(config_for(corpus, max_steps=3), out, auto_resume=True, progress_bar=False)  # starts afresh
    assert done.step == 3 and [r["step"] for r in metric_records(out) if "loss" in r] == [1, 2, 3]


def test_a_corpus_whose_preparation_stopped_part_way_is_refused_before_the_training_is_touched(tmp_path, monkeypatch):
    from elmo_testing import write_toy_text
    from spacy_elmo.training import corpus as corpus_module

    text, corpus, out = write_toy_text(tmp_path / "toy.txt"), tmp_path / "corpus", tmp_path / "out"
    corpus_module.prepare_corpus(text, corpus, seed=0, dev_fraction=0.1, test_fraction=0.1)
    pretrain(config_for(corpus, max_steps=2), out, progress_bar=False)
    before = (out / "metrics.jsonl").read_text()

    def full_disk(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(corpus_module.Vocabulary, "to_file", full_disk)
    with pytest.raises(OSError, match="No space left"):  # new shards and splits written, the vocabulary not
        corpus_module.prepare_corpus(text, corpus, seed=1, dev_fraction=0.1, test_fraction=0.1)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="its preparation stopped part-way \\(it holds .preparing\\): run the corpus command again"):
        pretrain(config_for(corpus, max_steps=4), out, auto_resume=True, progress_bar=False)
    assert (out / "metrics.jsonl").read_text() == before and (out / "model-last").is_dir()
    corpus_module.prepare_corpus(text, corpus, seed=1, dev_fraction=0.1, test_fraction=0.1)
    assert not (corpus / ".preparing").exists() and train_shards(corpus)


def test_pretrain_restores_the_callers_thread_count(toy_corpus, tmp_path):
    threads = torch.get_num_threads()
    pretrain(config_for(toy_corpus, max_steps=1, num_threads=threads + 1), tmp_path / "out", progress_bar=False)
    assert torch.get_num_threads() == threads
    with pytest.raises(ValueError, match="already holds"):
        pretrain(config_for(toy_corpus, max_steps=1, num_threads=threads + 1), tmp_path / "out", progress_bar=False)
    assert torch.get_num_threads() == threads


def test_a_signal_requests_a_stop_and_a_second_stops_at_once():
    previous = signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is previous


BF16_LOSS_TOLERANCE = 0.01
"""Relative difference allowed between a step's loss in bf16 autocast and in fp32."""


@pytest.mark.skipif(not bf16_is_fast(torch.device("cpu")), reason="this CPU has no native bfloat16 (AVX512-BF16 or AMX)")
def test_bf16_training_steps_have_the_fp32_losses_within_tolerance(toy_corpus, tmp_path):
    losses = {}
    for mixed in (False, True):
        out = tmp_path / f"mixed-{mixed}"
        pretrain(config_for(toy_corpus, max_steps=3, eval_every=3, mixed_precision=mixed), out, progress_bar=False)
        losses[mixed] = [r["loss"] for r in metric_records(out) if "loss" in r]
        assert all(math.isfinite(r["dev_mean"]) for r in metric_records(out) if "dev_mean" in r)
    assert losses[True] != losses[False]  # bf16 did run
    for bf16, fp32 in zip(losses[True], losses[False]):
        assert bf16 == pytest.approx(fp32, rel=BF16_LOSS_TOLERANCE)


def test_mixed_precision_without_native_bf16_trains_in_fp32_with_a_warning(toy_corpus, tmp_path, monkeypatch, caplog):
    from spacy_elmo.training import trainer

    monkeypatch.setattr(trainer, "bf16_is_fast", lambda device: False)
    pretrain(config_for(toy_corpus, max_steps=2, eval_every=2, mixed_precision=True), tmp_path / "mixed", progress_bar=False)
    pretrain(config_for(toy_corpus, max_steps=2, eval_every=2), tmp_path / "fp32", progress_bar=False)
    assert "no native bfloat16" in caplog.text
    mixed, fp32 = (saved_weights(tmp_path / name / "model-last") for name in ("mixed", "fp32"))
    assert mixed.keys() == fp32.keys() and all(numpy.array_equal(mixed[k], fp32[k]) for k in fp32)


def test_mixed_precision_auto_without_native_bf16_trains_in_fp32_silently(toy_corpus, tmp_path, monkeypatch, caplog):
    from spacy_elmo.training import trainer

    monkeypatch.setattr(trainer, "bf16_is_fast", lambda device: False)
    pretrain(config_for(toy_corpus, max_steps=2, eval_every=2, mixed_precision="auto"), tmp_path / "auto", progress_bar=False)
    pretrain(config_for(toy_corpus, max_steps=2, eval_every=2), tmp_path / "fp32", progress_bar=False)
    assert "bfloat16" not in caplog.text
    auto, fp32 = (saved_weights(tmp_path / name / "model-last") for name in ("auto", "fp32"))
    assert auto.keys() == fp32.keys() and all(numpy.array_equal(auto[k], fp32[k]) for k in fp32)


@pytest.mark.skipif(not bf16_is_fast(torch.device("cpu")), reason="this CPU has no native bfloat16 (AVX512-BF16 or AMX)")
def test_mixed_precision_auto_with_native_bf16_trains_as_true_does(toy_corpus, tmp_path):
    for mixed in (True, "auto"):
        pretrain(config_for(toy_corpus, max_steps=2, eval_every=2, mixed_precision=mixed, num_threads=1), tmp_path / str(mixed), progress_bar=False)
    auto, true = (saved_weights(tmp_path / name / "model-last") for name in ("auto", "True"))
    assert all(numpy.array_equal(auto[k], true[k]) for k in true)


@pytest.mark.parametrize("head, kept", [("sampled", ["kept"]), ("full", [])])
def test_cpu_training_keeps_freed_memory_for_the_sampled_head_only(toy_corpus, tmp_path, monkeypatch, head, kept):
    """The full head's logits change size every step: kept in the heap they would fragment it."""
    from spacy_elmo.training import trainer

    calls = []
    monkeypatch.setattr(trainer, "keep_freed_memory", lambda: calls.append("kept") or True)
    pretrain(with_overrides(toy_corpus, {"head.type": head}, max_steps=1, eval_every=1), tmp_path / "out", progress_bar=False)
    assert calls == kept


def test_a_checkpoint_from_before_a_model_key_existed_resumes_with_its_default(toy_corpus, tmp_path):
    """Checkpoints written before [model] token_encoder existed hold no such key; it means
    the char-CNN, so they resume under a config that names it."""
    pretrain(config_for(toy_corpus, max_steps=2), tmp_path / "out", progress_bar=False)
    path = tmp_path / "out" / "checkpoints" / "last.pt"
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["config"]["model"]["token_encoder"]
    torch.save(checkpoint, path)
    done = pretrain(with_overrides(toy_corpus, {"model.token_encoder": "characters"}, max_steps=4), tmp_path / "out", resume=True, progress_bar=False)
    assert done.step == 4


def test_a_step_budget_inside_the_warmup_is_warned_about(toy_corpus, tmp_path, caplog):
    pretrain(with_overrides(toy_corpus, {"schedule.warmup_steps": 4}, max_steps=4), tmp_path / "inside", progress_bar=False)
    assert "training.max_steps (4) ends the run inside its warmup (schedule.warmup_steps 4)" in caplog.text
    caplog.clear()
    pretrain(with_overrides(toy_corpus, {"schedule.warmup_steps": 3}, max_steps=4), tmp_path / "past", progress_bar=False)
    assert "inside its warmup" not in caplog.text
