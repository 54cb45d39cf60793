"""Do a pipeline's contextual vectors separate word senses? For each ambiguous word, two
sentences per sense; prints the mean cosine of `token._.elmo` between same-sense uses and
between different-sense uses, per ELMo layer and for the pipeline's mix. Run by hand:

    python benchmarks/sense_separation.py pipelines/en_elmo_demo [--corpus corpus]

With --corpus, first checks that no test sentence occurs in the training text.
"""

import argparse
import itertools
from pathlib import Path
from typing import Dict, List, Tuple

import numpy
import spacy

SENSES: Dict[str, Tuple[List[str], List[str]]] = {
    "bank": (
        ["We had a picnic on the grassy bank beside the slow river.", "The boat drifted toward the muddy bank of the stream."],
        ["She opened a savings account at the bank near her office.", "The bank raised its interest rates on home loans."],
    ),
    "bark": (
        ["The neighbour's dog began to bark at the mail carrier.", "I heard the puppy bark loudly all night."],
        ["The bark of the old oak tree was rough and grey.", "Beetles live under the loose bark of dead pine trees."],
    ),
    "bat": (
        ["A small bat flew out of the cave at dusk.", "The fruit bat hangs upside down while it sleeps."],
        ["He swung the wooden bat and hit the ball hard.", "The player broke his bat during the final inning."],
    ),
    "spring": (
        ["The flowers bloom early in the spring after a mild winter.", "We plan to travel to Japan next spring with friends."],
        ["Fresh water flows from a spring at the foot of the hill.", "The villagers drank from a cold mountain spring every morning."],
    ),
    "pitcher": (
        ["The pitcher threw a fast ball past the batter.", "Their best pitcher struck out nine players in the game."],
        ["She poured lemonade from a glass pitcher into the cups.", "A pitcher of cold water stood on the kitchen table."],
    ),
    "plant": (
        ["The power plant supplies electricity to the whole city.", "Workers at the car plant went on strike last week."],
        ["Water the plant on the windowsill twice a week.", "This plant grows small yellow flowers in the summer."],
    ),
}


def word_vectors(nlp, sentences: List[str], word: str) -> List[Tuple[numpy.ndarray, numpy.ndarray]]:
    """(layers (n_layers + 1, D), mixed (D,)) of the first `word` token of each sentence."""
    found = []
    for doc in nlp.pipe(sentences):
        token = next(t for t in doc if t.lower_ == word)
        found.append((doc._.elmo.layers[:, token.i], token._.elmo))
    return found


def cosine(a: numpy.ndarray, b: numpy.ndarray) -> float:
    return float(a @ b / (numpy.linalg.norm(a) * numpy.linalg.norm(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pipeline")
    parser.add_argument("--corpus", help="A prepared corpus folder to check the sentences against")
    args = parser.parse_args()
    nlp = spacy.load(args.pipeline)
    if args.corpus:
        tokenized = {" ".join(t.text for t in nlp.make_doc(s)) for pair in SENSES.values() for s in pair[0] + pair[1]}
        files = [*Path(args.corpus).glob("train/shard_*.txt"), Path(args.corpus) / "dev.txt", Path(args.corpus) / "test.txt"]
        seen = [line for f in files for line in f.read_text(encoding="utf-8").splitlines() if line in tokenized]
        print(f"test sentences found in the corpus: {len(seen)}")
    n_layers = nlp.get_pipe("elmo").bilm.n_output_layers
    columns = [f"layer {j}" for j in range(1, n_layers)] + ["mix"]
    print(f"{'word':8} " + "  ".join(f"{c + ' same/diff':>22}" for c in columns))
    wins = 0
    for word, (first, second) in SENSES.items():
        a, b = word_vectors(nlp, first, word), word_vectors(nlp, second, word)
        cells = []
        for column in range(n_layers):  # the LSTM layers, then the mix (the last column)
            vector = (lambda v, column=column: v[0][column + 1]) if column < n_layers - 1 else (lambda v: v[1])
            same = numpy.mean([cosine(vector(x), vector(y)) for uses in (a, b) for x, y in itertools.combinations(uses, 2)])
            different = numpy.mean([cosine(vector(x), vector(y)) for x, y in itertools.product(a, b)])
            cells.append(f"{same:10.3f} / {different:.3f}")
        separated = same > different
        wins += separated
        print(f"{word:8} " + "  ".join(f"{c:>22}" for c in cells) + ("   separated" if separated else "   NOT separated"))
    print(f"words whose same-sense cosine (mix) exceeds the different-sense cosine: {wins} of {len(SENSES)}")


if __name__ == "__main__":
    main()
