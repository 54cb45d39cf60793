"""By default a doc's vectors do not depend on its batch, batch size or history."""

import random

import numpy
import pytest
import spacy

WORDS = "the bank river cash money water loan we sat by of and a it was to in on at flowed grassy".split()


def random_texts(n: int, seed: int):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60))) + " ." for _ in range(n)]


@pytest.mark.parametrize("encoder", ["characters", "words"])
def test_vectors_do_not_depend_on_batch_or_history(encoder, request):
    tiny_model_dir = request.getfixturevalue("tiny_model_dir" if encoder == "characters" else "tiny_word_model_dir")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "batch_tokens": 512})
    target = "We sat by the bank of the river and watched the water ."
    alone = nlp(target)._.elmo.layers

    batch = random_texts(31, seed=1)
    batch.insert(17, target)
    in_batch = list(nlp.pipe(batch, batch_size=32))[17]._.elmo.layers
    numpy.testing.assert_allclose(in_batch, alone, atol=1e-5)

    for _ in nlp.pipe(random_texts(100, seed=2), batch_size=7):
        pass
    after_history = nlp(target)._.elmo.layers
    numpy.testing.assert_allclose(after_history, alone, atol=1e-5)

    small_budget = spacy.blank("en")
    small_budget.add_pipe("elmo", config={"weights": str(tiny_model_dir), "batch_tokens": 64, "window_size": 64})
    numpy.testing.assert_allclose(small_budget(target)._.elmo.layers, alone, atol=1e-5)
