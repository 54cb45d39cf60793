"""Linear probes: how much of a token label each biLM layer (and the mix) makes linearly readable.

For every label the docs carry (fine tag, UD part of speech, morphological features,
dependency relation) and every layer, a multinomial logistic regression is trained on the
frozen token vectors of the training docs and scored on held-out docs, next to the
most-frequent-label-per-word baseline (the paper's question in its Tables 5 and 6:
part of speech is best read from the first LSTM layer). Training is full-batch L-BFGS from
zero weights on standardized features: deterministic and free of learning-rate tuning.
"""

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, cast

import numpy
import torch
from spacy.language import Language
from spacy.tokens import Doc, Token

from .vectors import embed, layer_names

LABELS: Dict[str, Tuple[str, Callable[[Token], str]]] = {
    "tag": ("TAG", lambda token: token.tag_),
    "pos": ("POS", lambda token: token.pos_),
    "morph": ("MORPH", lambda token: str(token.morph)),
    "dep": ("DEP", lambda token: token.dep_),
}
"""label name -> (the spaCy annotation a doc must have, the token's label)."""


@dataclass
class TokenFeatures:
    """Frozen vectors and labels of the non-space tokens of some docs."""

    layers: List[numpy.ndarray]
    """One (n_tokens, 2P) float32 array per output layer, then the component's mix."""
    words: List[str]
    labels: Dict[str, List[Optional[str]]]
    """label name -> one label per token, None where the doc does not carry it."""


@dataclass
class LabelResult:
    n_classes: int
    n_train: int
    n_eval: int
    baseline: float
    """Accuracy of tagging each word with its most frequent training label."""
    accuracy: List[float]
    """Held-out accuracy of the probe on each layer, then the mix."""


@dataclass
class ProbeReport:
    layers: List[str]
    labels: Dict[str, LabelResult] = field(default_factory=dict)

    def to_dict(self) -> Dict:
        return {"layers": self.layers, "labels": {name: asdict(result) for name, result in self.labels.items()}}

    def table(self) -> str:
        """A markdown table: one row per label, the baseline then one column per layer."""
        header = ["label", "classes", "train", "eval", "most frequent"] + self.layers
        rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for name, result in self.labels.items():
            best = max(result.accuracy)
            cells = [f"**{100 * a:.2f}**" if a == best else f"{100 * a:.2f}" for a in result.accuracy]
            rows.append(f"| `{name}` | {result.n_classes} | {result.n_train:,} | {result.n_eval:,} | {100 * result.baseline:.2f} | " + " | ".join(cells) + " |")
        return "\n".join(rows)


def collect_features(nlp: Language, docs: Sequence[Doc], labels: Iterable[str], desc: str = "embed") -> TokenFeatures:
    """Run the elmo component over `docs` and gather every non-space token's vectors and labels."""
    names = check_labels(labels)
    per_layer: List[List[numpy.ndarray]] = []
    words: List[str] = []
    gathered: Dict[str, List[Optional[str]]] = {name: [] for name in names}
    for doc in embed(nlp, docs, total_tokens=sum(len(d) for d in docs), desc=desc):
        keep = [token.i for token in doc if not token.is_space]
        arrays = list(doc._.elmo.layers[:, keep]) + [doc._.elmo.mixed[keep]]
        if not per_layer:
            per_layer = [[] for _ in arrays]
        for store, array in zip(per_layer, arrays):
            store.append(array)
        words.extend(doc[i].text for i in keep)
        for name in names:
            annotation, get = LABELS[name]
            carried = doc.has_annotation(annotation)
            gathered[name].extend(_label(get(doc[i]), name) if carried else None for i in keep)
    return TokenFeatures([numpy.concatenate(store) for store in per_layer], words, gathered)


def _label(value: str, name: str) -> Optional[str]:
    """An empty string is a missing label, except for morph (a token without features)."""
    return value if value or name == "morph" else None


def check_labels(labels: Iterable[str]) -> List[str]:
    names = list(labels)
    unknown = [name for name in names if name not in LABELS]
    if unknown or not names:
        raise ValueError(f"labels must be some of {sorted(LABELS)}, got {names}")
    return names


def run_probes(train: TokenFeatures, held_out: TokenFeatures, labels: Iterable[str], l2: float = 1e-4, max_iter: int = 100) -> ProbeReport:
    """A probe per (label, layer) trained on `train` and scored on `held_out`."""
    n_layers = len(train.layers) - 1
    report = ProbeReport(layer_names(n_layers))
    for name in check_labels(labels):
        fit_rows, y_train = _labelled(train.labels[name])
        eval_rows, y_eval = _labelled(held_out.labels[name])
        if not fit_rows or not eval_rows:
            continue
        classes = sorted(set(y_train))
        accuracy = []
        for x_train, x_eval in zip(train.layers, held_out.layers):
            probe = LinearProbe.fit(x_train[fit_rows], y_train, classes, l2=l2, max_iter=max_iter)
            accuracy.append(probe.accuracy(x_eval[eval_rows], y_eval))
        baseline = MostFrequentLabel.fit([train.words[i] for i in fit_rows], y_train)
        report.labels[name] = LabelResult(
            n_classes=len(classes),
            n_train=len(fit_rows),
            n_eval=len(eval_rows),
            baseline=baseline.accuracy([held_out.words[i] for i in eval_rows], y_eval),
            accuracy=accuracy,
        )
    return report


def _labelled(labels: Sequence[Optional[str]]) -> Tuple[List[int], List[str]]:
    """(the rows that carry a label, their labels)."""
    rows = [i for i, label in enumerate(labels) if label is not None]
    return rows, [cast(str, labels[i]) for i in rows]


class LinearProbe:
    """Multinomial logistic regression on standardized features, fitted full-batch by L-BFGS."""

    def __init__(self, mean: numpy.ndarray, scale: numpy.ndarray, weight: numpy.ndarray, bias: numpy.ndarray, classes: List[str]) -> None:
        self.mean, self.scale = mean, scale  # (D,)
        self.weight, self.bias = weight, bias  # (D, C), (C,)
        self.classes = classes

    @classmethod
    def fit(cls, features: numpy.ndarray, labels: Sequence[str], classes: List[str], l2: float = 1e-4, max_iter: int = 100) -> "LinearProbe":
        """features (N, D); labels: N strings out of `classes`; l2: weight decay on the mean loss."""
        mean = features.mean(axis=0)
        scale = features.std(axis=0) + 1e-6
        x = torch.from_numpy((features - mean) / scale).float()
        index = {label: k for k, label in enumerate(classes)}
        y = torch.tensor([index[label] for label in labels])
        weight = torch.zeros(x.shape[1], len(classes), requires_grad=True)
        bias = torch.zeros(len(classes), requires_grad=True)
        optimizer = torch.optim.LBFGS([weight, bias], max_iter=max_iter, history_size=20, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(x @ weight + bias, y) + l2 * weight.pow(2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        return cls(mean, scale, weight.detach().numpy(), bias.detach().numpy(), classes)

    def predict(self, features: numpy.ndarray) -> List[str]:
        """features (N, D) -> N labels."""
        scores = ((features - self.mean) / self.scale) @ self.weight + self.bias
        return [self.classes[k] for k in scores.argmax(axis=1)]

    def accuracy(self, features: numpy.ndarray, labels: Sequence[str]) -> float:
        return _accuracy(self.predict(features), labels)


class MostFrequentLabel:
    """Each word's most frequent training label; the overall most frequent one for unseen words."""

    def __init__(self, by_word: Dict[str, str], fallback: str) -> None:
        self.by_word = by_word
        self.fallback = fallback

    @classmethod
    def fit(cls, words: Sequence[str], labels: Sequence[str]) -> "MostFrequentLabel":
        counts: Dict[str, Counter] = defaultdict(Counter)
        for word, label in zip(words, labels):
            counts[word][label] += 1
        by_word = {word: _most_common(counter) for word, counter in counts.items()}
        return cls(by_word, _most_common(Counter(labels)))

    def accuracy(self, words: Sequence[str], labels: Sequence[str]) -> float:
        return _accuracy([self.by_word.get(word, self.fallback) for word in words], labels)


def _most_common(counter: Counter) -> str:
    """The most frequent key; ties go to the alphabetically first, so the result is deterministic."""
    return min(counter, key=lambda key: (-counter[key], key))


def _accuracy(predicted: Sequence[str], gold: Sequence[str]) -> float:
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold)


def split_docs(docs: Sequence[Doc], eval_fraction: float, seed: int) -> Tuple[List[Doc], List[Doc]]:
    """(train, held-out) docs, a seeded random split by document."""
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be between 0 and 1, got {eval_fraction}")
    if len(docs) < 2:
        raise ValueError(f"a held-out split needs at least 2 docs, got {len(docs)}: give a second DocBin for evaluation")
    order = numpy.random.default_rng(seed).permutation(len(docs))
    n_eval = min(len(docs) - 1, max(1, round(eval_fraction * len(docs))))
    held_out = set(order[:n_eval].tolist())
    return [d for i, d in enumerate(docs) if i not in held_out], [d for i, d in enumerate(docs) if i in held_out]
