"""The uses of a word across a corpus, in 2-D: what a sense map shows.

`collect_uses` embeds the docs of a corpus that hold a word and gathers its vectors on
one layer; `project` (PCA) and `kmeans` are deterministic, so the same corpus and model
give the same map every time. `ambiguous_words` picks words worth mapping. Vectors are
scaled to unit length before PCA and k-means, so distances follow the cosine similarity
the pipeline's similarity hooks use.
"""

from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy
from spacy.language import Language
from spacy.tokens import Doc, Token

from ..pipeline.component import elmo_component
from .vectors import embed, unit_rows

KMEANS_SEED = 0
KMEANS_RESTARTS = 10
KMEANS_MAX_ITERATIONS = 100


@dataclass
class WordUses:
    """Every use of `word` in some docs, on one layer."""

    word: str
    layer: int
    """The layer index the vectors come from (non-negative)."""
    vectors: numpy.ndarray
    """(n_uses, 2P) float32: the word's vectors on `layer`, in corpus order."""
    context_free: numpy.ndarray
    """(2P,) float32: the layer-0 vector (the token encoding, the same in any context) of the
    word's most frequent spelling among the uses (first seen on a tie)."""
    sentences: List[str]
    """The text of each use's sentence (its doc when the doc has no sentence boundaries)."""
    offsets: List[int]
    """Where the word starts in each sentence text (characters)."""
    positions: List[Tuple[int, int]]
    """(doc number, token index) of each use."""

    def __len__(self) -> int:
        return len(self.sentences)

    def context(self, use: int, width: int = 40) -> str:
        """A use's sentence cut to about `width` characters either side of the word."""
        return "".join(self.context_parts(use, width))

    def context_parts(self, use: int, width: int = 40) -> Tuple[str, str, str]:
        """(text before, the word as written, text after) of `context`."""
        sentence, start = self.sentences[use], self.offsets[use]
        end = start + len(self.word)
        before = ("…" if start > width else "") + sentence[max(0, start - width) : start]
        after = sentence[end : end + width] + ("…" if end + width < len(sentence) else "")
        return before, sentence[start:end], after


def matches(token: Token, word: str) -> bool:
    """Whether `token` is a use of `word` (case-insensitive)."""
    return token.lower_ == word.lower()


def collect_uses(nlp: Language, docs: Iterable[Doc], word: str, layer: int = -1) -> WordUses:
    """Embed (with `nlp`'s elmo component) only the docs holding `word`, and gather its uses.
    A `layer` the model lacks is an error before any doc is read."""
    check_layer(nlp, layer)
    holding = [doc for doc in docs if any(matches(token, word) for token in doc)]
    total = sum(len(doc) for doc in holding)
    return word_uses(list(embed(nlp, holding, total_tokens=total, desc=f"embed '{word}'")), word, layer)


def word_uses(docs: Sequence[Doc], word: str, layer: int = -1) -> WordUses:
    """The uses of `word` in docs that already carry `doc._.elmo.layers`."""
    vectors, sentences, offsets, positions = [], [], [], []
    context_free: Dict[str, numpy.ndarray] = {}
    spellings: Counter = Counter()
    n_layers = None
    for number, doc in enumerate(docs):
        uses = [token for token in doc if matches(token, word)]
        if not uses:
            continue
        layers = _layers(doc)
        n_layers = layers.shape[0]
        index = _layer_index(layer, n_layers)
        for token in uses:
            vectors.append(layers[index, token.i])
            context_free.setdefault(token.text, layers[0, token.i])
            spellings[token.text] += 1
            sentence = token.sent if doc.has_annotation("SENT_START") else doc[:]
            sentences.append(sentence.text)
            offsets.append(token.idx - sentence.start_char)
            positions.append((number, token.i))
    if n_layers is None:
        raise ValueError(f"'{word}' does not occur in the corpus")
    return WordUses(
        word=word,
        layer=_layer_index(layer, n_layers),
        vectors=numpy.stack(vectors).astype(numpy.float32),
        context_free=context_free[spellings.most_common(1)[0][0]].astype(numpy.float32),
        sentences=sentences,
        offsets=offsets,
        positions=positions,
    )


def _layers(doc: Doc) -> numpy.ndarray:
    output = doc._.elmo
    if output is None or output.layers is None:
        raise ValueError("the docs carry no doc._.elmo.layers: embed them with an elmo component keeping its layers")
    return output.layers


def check_layer(nlp: Language, layer: int) -> None:
    """A ValueError unless `nlp`'s elmo component has output layer `layer` (negative counts from the top)."""
    _layer_index(layer, elmo_component(nlp).bilm.n_output_layers)


def _layer_index(layer: int, n_layers: int) -> int:
    if not -n_layers <= layer < n_layers:
        raise ValueError(f"layer {layer} does not exist: the model has layers 0..{n_layers - 1}")
    return layer % n_layers


class Projection(NamedTuple):
    """A fitted PCA: `transform` maps (n, d) points to (n, k) coordinates."""

    mean: numpy.ndarray
    """(d,) the centre of the fitted points."""
    components: numpy.ndarray
    """(k, d) orthonormal axes, largest variance first; each one's largest-magnitude entry is positive."""
    explained: numpy.ndarray
    """(k,) the share of the fitted points' variance each axis holds."""

    def transform(self, points: numpy.ndarray) -> numpy.ndarray:
        return (numpy.asarray(points, dtype=numpy.float64) - self.mean) @ self.components.T


def fit_pca(points: numpy.ndarray, n_components: int = 2) -> Projection:
    """PCA of (n, d) points by SVD, with the sign convention of `Projection.components`
    (no randomness: the same points give the same axes). Axes beyond the data's rank are zeros."""
    points = numpy.asarray(points, dtype=numpy.float64)
    if points.ndim != 2 or len(points) < 1:
        raise ValueError(f"PCA needs an (n, d) array of points, got shape {points.shape}")
    mean = points.mean(axis=0)
    _, singular, axes = numpy.linalg.svd(points - mean, full_matrices=False)
    components = numpy.zeros((n_components, points.shape[1]))
    kept = min(n_components, len(axes))
    components[:kept] = axes[:kept]
    variance = singular**2
    explained = numpy.zeros(n_components)
    if variance.sum() > 0:
        explained[:kept] = variance[:kept] / variance.sum()
    components[explained == 0] = 0.0  # directions of no variance carry no meaning
    rows = numpy.arange(n_components)
    signs = numpy.sign(components[rows, numpy.argmax(numpy.abs(components), axis=1)])
    return Projection(mean, components * numpy.where(signs == 0, 1.0, signs)[:, None], explained)


def kmeans(points: numpy.ndarray, k: int = 2, seed: int = KMEANS_SEED, restarts: int = KMEANS_RESTARTS) -> numpy.ndarray:
    """(n,) cluster of each of (n, d) points: Lloyd's k-means from `restarts` k-means++
    starts drawn with a fixed seed, keeping the tightest. Clusters are numbered in order of
    their first point, so the numbering does not depend on the starts."""
    points = numpy.asarray(points, dtype=numpy.float64)
    if not 1 <= k <= len(points):
        raise ValueError(f"k-means with k = {k} needs at least {k} points, got {len(points)}")
    rng = numpy.random.default_rng(seed)
    best, best_inertia = None, numpy.inf
    for _ in range(restarts):
        assignment, inertia = _lloyd(points, _plus_plus(points, k, rng))
        if inertia < best_inertia - 1e-12:
            best, best_inertia = assignment, inertia
    assert best is not None
    return _first_seen_order(best)


def _plus_plus(points: numpy.ndarray, k: int, rng: numpy.random.Generator) -> numpy.ndarray:
    """(k, d) starting centres, each drawn with probability proportional to its squared
    distance from the centres already drawn."""
    centres = [points[rng.integers(len(points))]]
    for _ in range(1, k):
        distances = _squared_distances(points, numpy.stack(centres)).min(axis=1)
        total = distances.sum()
        chosen = rng.choice(len(points), p=distances / total) if total > 0 else rng.integers(len(points))
        centres.append(points[chosen])
    return numpy.stack(centres)


def _lloyd(points: numpy.ndarray, centres: numpy.ndarray) -> Tuple[numpy.ndarray, float]:
    """(assignment (n,), inertia) once the assignment stops changing."""
    assignment = numpy.full(len(points), -1)
    for _ in range(KMEANS_MAX_ITERATIONS):
        distances = _squared_distances(points, centres)
        new = distances.argmin(axis=1)
        if numpy.array_equal(new, assignment):
            break
        assignment = new
        for cluster in range(len(centres)):
            members = points[assignment == cluster]
            if len(members):
                centres[cluster] = members.mean(axis=0)
    inertia = float(_squared_distances(points, centres)[numpy.arange(len(points)), assignment].sum())
    return assignment, inertia


def _squared_distances(points: numpy.ndarray, centres: numpy.ndarray) -> numpy.ndarray:
    """(n, d), (k, d) -> (n, k)."""
    return ((points[:, None, :] - centres[None, :, :]) ** 2).sum(axis=-1)


def _first_seen_order(assignment: numpy.ndarray) -> numpy.ndarray:
    order: Dict[int, int] = {}
    for cluster in assignment:
        order.setdefault(int(cluster), len(order))
    return numpy.array([order[int(cluster)] for cluster in assignment])


@dataclass
class SenseMap:
    """A word's uses projected to 2-D, with a group for each use."""

    uses: WordUses
    coordinates: numpy.ndarray
    """(n_uses, 2): PCA coordinates of the uses."""
    context_free: numpy.ndarray
    """(2,): the layer-0 vector on the same axes."""
    groups: List[str]
    """(n_uses) the group of each use: "cluster 1", ... or a label the user gave."""
    explained: numpy.ndarray
    """(2,): the share of the uses' variance on each axis."""


def sense_map(uses: WordUses, clusters: int = 2, labels: Optional[Sequence[str]] = None) -> SenseMap:
    """Project `uses` by PCA of their unit vectors and group them by k-means with
    `clusters` clusters, or by `labels` (one per use) when given."""
    if len(uses) < 2:
        raise ValueError(f"a sense map of '{uses.word}' needs at least 2 uses, the corpus has {len(uses)}")
    if labels is not None and len(labels) != len(uses):
        raise ValueError(f"{len(labels)} labels given for {len(uses)} uses of '{uses.word}'")
    vectors = unit_rows(uses.vectors, numpy.float64)
    projection = fit_pca(vectors)
    if labels is None:
        groups = [f"cluster {c + 1}" for c in kmeans(vectors, clusters)]
    else:
        groups = [str(label) for label in labels]
    return SenseMap(
        uses=uses,
        coordinates=projection.transform(vectors),
        context_free=projection.transform(unit_rows(uses.context_free[None], numpy.float64))[0],
        groups=groups,
        explained=projection.explained,
    )


def dispersion(vectors: numpy.ndarray) -> float:
    """Mean cosine distance of (n, d) vectors from their centroid (0: all alike)."""
    unit = unit_rows(vectors, numpy.float64)
    centroid = unit_rows(unit.mean(axis=0, keepdims=True), numpy.float64)[0]
    return float(numpy.mean(1.0 - unit @ centroid))


class WordSpread(NamedTuple):
    word: str
    uses: int
    spread: float
    """`dispersion` of the word's uses."""
    relative: float
    """spread / the dispersion of all candidate tokens of the corpus together."""


def is_candidate(token: Token) -> bool:
    """A content word: alphabetic, not a stop word, at least 3 letters."""
    return token.is_alpha and not token.is_stop and len(token) >= 3


def ambiguous_words(docs: Sequence[Doc], n: int = 3, layer: int = -1, min_count: int = 8) -> List[WordSpread]:
    """The `n` content words (see `is_candidate`, compared lowercased) of embedded `docs`
    used at least `min_count` times whose vectors on `layer` spread the most.

    The spread of a word is the mean cosine distance of its uses from their centroid; a
    word whose contexts pull its vectors apart (several senses, several roles) spreads
    more. It is reported relative to the spread of all candidate tokens of the corpus
    around their common centroid: 1.0 would mean the uses of one word differ as much as
    arbitrary tokens do. Layer 0 is context-free, so every word has spread 0 there."""
    by_word: Dict[str, List[numpy.ndarray]] = {}
    counts: Counter = Counter()
    for doc in docs:
        candidates = [token for token in doc if is_candidate(token)]
        if not candidates:
            continue
        layers = _layers(doc)
        index = _layer_index(layer, layers.shape[0])
        for token in candidates:
            by_word.setdefault(token.lower_, []).append(layers[index, token.i])
            counts[token.lower_] += 1
    frequent = [word for word, count in counts.items() if count >= min_count]
    if not frequent:
        return []
    baseline = dispersion(numpy.stack([v for vectors in by_word.values() for v in vectors]))
    spreads = [(word, dispersion(numpy.stack(by_word[word]))) for word in frequent]
    spreads.sort(key=lambda item: (-item[1], item[0]))
    return [WordSpread(word, counts[word], spread, spread / baseline if baseline else 0.0) for word, spread in spreads[:n]]
