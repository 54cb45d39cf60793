"""Perplexity from NLL sums: exact, and finite (JSON-safe) for a diverged model."""

import json
import math

import pytest

from spacy_elmo.training.perplexity import MAX_LOG_PERPLEXITY, NLLSums, Perplexity, perplexity_of


def test_perplexity_is_the_exp_of_the_mean_nll_per_direction_and_together():
    result = Perplexity.from_sums(NLLSums(forward=20.0, backward=30.0, predictions=10))
    assert result.forward == pytest.approx(math.exp(2.0))
    assert result.backward == pytest.approx(math.exp(3.0))
    assert result.mean == pytest.approx(math.exp(2.5))


def test_a_diverged_model_gives_a_finite_perplexity_that_json_writes_as_a_number():
    result = Perplexity.from_sums(NLLSums(forward=1e6, backward=1e6, predictions=10))
    assert result.mean == perplexity_of(1e5) == math.exp(MAX_LOG_PERPLEXITY)
    text = json.dumps({"mean": result.mean})
    assert "Infinity" not in text and json.loads(text)["mean"] == result.mean
