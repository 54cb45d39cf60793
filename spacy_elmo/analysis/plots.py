"""PNG figures of a biLM and the pipelines built on it: training curves, layer probes,
downstream mix weights and sense maps.

Each `plot_*` function writes a PNG and returns its path; the `*_figure` functions build
the matplotlib figure (`png_bytes` / `save_png` render it), so the report can embed the
same figures. matplotlib (the `plots` extra) is imported only when a figure is drawn, and
figures are drawn on the non-interactive Agg canvas, never through pyplot's global state.
"""

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

import numpy

from .senses import SenseMap

PathLike = Union[str, Path]
DPI = 100


class MissingMatplotlib(ImportError):
    """A figure was asked for and matplotlib is not installed."""

    def __init__(self) -> None:
        super().__init__("plots need matplotlib: pip install 'spacy-elmo[plots]'")


def new_figure(width: float, height: float) -> Any:
    """An empty matplotlib Figure (width x height inches) on an Agg canvas."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise MissingMatplotlib() from err
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_bytes(figure: Any) -> bytes:
    """The figure rendered as a PNG."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def save_png(figure: Any, output: PathLike) -> Path:
    """Write the figure as a PNG at `output` (its folder must exist); returns the path."""
    output = Path(output)
    if not output.parent.is_dir():
        raise ValueError(f"{output.parent}: output directory not found")
    output.write_bytes(png_bytes(figure))
    return output


# training curves


@dataclass
class RunMetrics:
    """A pretraining run's metrics.jsonl, as arrays over its log and evaluation lines."""

    label: str
    steps: numpy.ndarray
    """(n_logs,) the step of each log line; the other log arrays follow it."""
    tokens: numpy.ndarray
    loss: numpy.ndarray
    tokens_per_second: numpy.ndarray
    learning_rate: numpy.ndarray
    elapsed_seconds: numpy.ndarray
    dev_steps: numpy.ndarray
    """(n_evals,) the step of each dev evaluation."""
    dev_perplexity: numpy.ndarray
    """(n_evals,) the mean of the forward and backward dev perplexities."""

    @property
    def dev_tokens(self) -> numpy.ndarray:
        """(n_evals,) training tokens at each evaluation (interpolated between log lines)."""
        return along_steps(self.dev_steps, self.steps, self.tokens)

    @property
    def dev_seconds(self) -> numpy.ndarray:
        """(n_evals,) training seconds at each evaluation (interpolated between log lines)."""
        return along_steps(self.dev_steps, self.steps, self.elapsed_seconds)


def along_steps(steps: numpy.ndarray, known_steps: numpy.ndarray, values: numpy.ndarray) -> numpy.ndarray:
    """`values` (given at `known_steps`, from step 0 at 0) at `steps`, linear between
    known points and extrapolated at the last known rate beyond them."""
    known = numpy.concatenate([[0], known_steps]).astype(float)
    given = numpy.concatenate([[0], values]).astype(float)
    result = numpy.interp(steps, known, given)
    beyond = steps > known[-1]
    if beyond.any() and len(known) > 1:
        rate = (given[-1] - given[-2]) / max(known[-1] - known[-2], 1e-12)
        result[beyond] = given[-1] + rate * (steps[beyond] - known[-1])
    return result


class NoTrainingSteps(ValueError):
    """A pretraining's metrics.jsonl with evaluations but no training log line yet."""


LOG_KEYS = ("step", "tokens", "loss", "tokens_per_second", "learning_rate", "elapsed_seconds")


def read_metrics(path: PathLike, label: Optional[str] = None) -> RunMetrics:
    """Parse a trainer's metrics.jsonl (log lines carry "loss", evaluation lines "dev_mean");
    `label` defaults to the run folder's name. Lines cut by a killed run are skipped."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: metrics file not found")
    logs: List[Dict[str, Any]] = []
    evals: List[Dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and all(key in record for key in LOG_KEYS):
            logs.append(record)
        elif isinstance(record, dict) and "step" in record and "dev_mean" in record:
            evals.append(record)
    if not logs and evals:
        raise NoTrainingSteps(f"{path}: the run logged no training steps (it ended before its first log line, every log_every steps)")
    if not logs:
        raise ValueError(f"{path} holds no training log lines (is it a pretraining metrics.jsonl?)")

    def column(records: List[Dict[str, Any]], key: str) -> numpy.ndarray:
        return numpy.array([float(r[key]) for r in records])

    return RunMetrics(
        label=label or path.resolve().parent.name,
        steps=column(logs, "step"),
        tokens=column(logs, "tokens"),
        loss=column(logs, "loss"),
        tokens_per_second=column(logs, "tokens_per_second"),
        learning_rate=column(logs, "learning_rate"),
        elapsed_seconds=column(logs, "elapsed_seconds"),
        dev_steps=column(evals, "step"),
        dev_perplexity=column(evals, "dev_mean"),
    )


def training_curves_figure(runs: Sequence[RunMetrics]) -> Any:
    """Six panels: training loss and dev perplexity against tokens and against time,
    tokens/s against time, learning rate against tokens; one line per run."""
    figure = new_figure(13, 7)
    axes = figure.subplots(2, 3)
    panels = [
        (axes[0, 0], "training tokens", "training loss (nats)", lambda r: (r.tokens, r.loss)),
        (axes[0, 1], "hours", "training loss (nats)", lambda r: (r.elapsed_seconds / 3600, r.loss)),
        (axes[0, 2], "hours", "tokens / s", lambda r: (r.elapsed_seconds / 3600, r.tokens_per_second)),
        (axes[1, 0], "training tokens", "dev perplexity", lambda r: (r.dev_tokens, r.dev_perplexity)),
        (axes[1, 1], "hours", "dev perplexity", lambda r: (r.dev_seconds / 3600, r.dev_perplexity)),
        (axes[1, 2], "training tokens", "learning rate", lambda r: (r.tokens, r.learning_rate)),
    ]
    for ax, xlabel, ylabel, series in panels:
        for run in runs:
            x, y = series(run)
            ax.plot(x, y, marker="o" if ylabel == "dev perplexity" else None, markersize=3, label=run.label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    for ax in axes[1, :2]:
        _dev_axis(ax, runs)
    axes[0, 0].legend()
    return figure


def _dev_axis(ax: Any, runs: Sequence[RunMetrics]) -> None:
    from matplotlib.ticker import ScalarFormatter

    if any(len(run.dev_perplexity) for run in runs):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
    else:
        ax.text(0.5, 0.5, "no dev evaluations", ha="center", va="center", transform=ax.transAxes)


def plot_training_curves(metrics: Sequence[PathLike], output: PathLike, labels: Optional[Sequence[str]] = None) -> Path:
    """Training curves of one or several runs (their metrics.jsonl files) in one PNG."""
    if labels is not None and len(labels) != len(metrics):
        raise ValueError(f"{len(labels)} labels given for {len(metrics)} metrics files")
    runs = [read_metrics(path, labels[i] if labels else None) for i, path in enumerate(metrics)]
    return save_png(training_curves_figure(runs), output)


# layer probes


def read_probe_report(path: PathLike) -> Dict[str, Any]:
    """A probe report JSON: {"layers": [...], "labels": {name: {"accuracy": [...], "baseline": b, ...}}}."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: probe report not found")
    report = json.loads(path.read_text(encoding="utf-8"))
    check_probe_report(report, str(path))
    return report


def check_probe_report(report: Any, where: str = "the probe report") -> None:
    """An error naming what is missing unless every label has an accuracy per layer."""
    if not isinstance(report, dict) or not isinstance(report.get("layers"), list) or not isinstance(report.get("labels"), dict):
        raise ValueError(f"{where}: expected an object with 'layers' (a list) and 'labels' (an object)")
    for name, probe in report["labels"].items():
        accuracy = probe.get("accuracy") if isinstance(probe, dict) else None
        if not isinstance(accuracy, list) or len(accuracy) != len(report["layers"]):
            raise ValueError(f"{where}: label '{name}' needs 'accuracy', one value for each of the {len(report['layers'])} layers")


def probes_figure(report: Dict[str, Any]) -> Any:
    """One panel per label: probe accuracy of each layer as bars, the most-frequent-label
    baseline as a dashed line."""
    check_probe_report(report)
    layers, labels = report["layers"], report["labels"]
    if not labels:
        raise ValueError("the probe report has no labels")
    columns, rows = min(len(labels), 3), math.ceil(len(labels) / 3)
    figure = new_figure(columns * max(4.0, 1.0 + 0.9 * len(layers)), 3.8 * rows)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, (name, probe) in zip(axes, labels.items()):
        _probe_panel(ax, name, probe, layers)
    for ax in axes[len(labels) :]:
        ax.set_visible(False)
    return figure


def _probe_panel(ax: Any, name: str, probe: Dict[str, Any], layers: List[str]) -> None:
    accuracy = numpy.array(probe["accuracy"], dtype=float)
    positions = numpy.arange(len(layers))
    bars = ax.bar(positions, accuracy, color=[f"C{i}" for i in range(len(layers))])
    ax.bar_label(bars, labels=[f"{a:.3f}" for a in accuracy], fontsize=8)
    values = list(accuracy)
    if probe.get("baseline") is not None:
        ax.axhline(probe["baseline"], color="black", linestyle="--", linewidth=1, label=f"most frequent label {probe['baseline']:.3f}")
        values.append(probe["baseline"])
        ax.legend(loc="lower right", fontsize=8)
    low, high = min(values), max(values)
    margin = max(0.02, 0.25 * (high - low))
    ax.set_ylim(max(0.0, low - margin), min(1.0, high + margin) + 0.01)
    ax.set_xticks(positions, layers)
    ax.set_ylabel("accuracy")
    details = [f"{probe[key]:,} {word}" for key, word in (("n_classes", "classes"), ("n_train", "train"), ("n_eval", "eval")) if key in probe]
    ax.set_title(f"{name}" + (f" ({', '.join(details)})" if details else ""), fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def plot_probes(report: Union[PathLike, Dict[str, Any]], output: PathLike) -> Path:
    """Per-layer probe accuracies of a probe report (a JSON path or its dict) in one PNG."""
    data = report if isinstance(report, dict) else read_probe_report(report)
    return save_png(probes_figure(data), output)


# mix weights


class MixWeights(NamedTuple):
    weights: numpy.ndarray
    """(n_layers + 1,) softmax(s), layer 0 first."""
    gamma: float


def pipeline_mixes(nlp: Any) -> Dict[str, MixWeights]:
    """Component name -> what its ELMo mix learned, for every trained mix downstream of the
    pipeline's elmo components (a component with several mixes gives "name #1", "name #2", ...)."""
    from ..pipeline.architectures import mix_gamma, mix_weights
    from ..pipeline.component import ElmoComponent

    elmos = [component for _, component in nlp.pipeline if isinstance(component, ElmoComponent)]
    if not elmos:
        raise ValueError("the pipeline has no elmo component")
    found: Dict[str, MixWeights] = {}
    for elmo in elmos:
        for name, mixes in elmo.mixes.items():
            trained = [mix for mix in mixes if mix.has_param("scalars")]
            for number, mix in enumerate(trained, start=1):
                key = name if len(trained) == 1 else f"{name} #{number}"
                found[key] = MixWeights(numpy.asarray(mix_weights(mix), dtype=float), mix_gamma(mix))
    return found


def mix_weights_figure(mixes: Dict[str, MixWeights]) -> Any:
    """One group of bars per component: the softmax weight of each layer, gamma under the
    component's name, the uniform weight as a dashed line."""
    if not mixes:
        raise ValueError("no trained ELMo mixes to plot")
    n_layers = max(len(mix.weights) for mix in mixes.values())
    figure = new_figure(max(5.0, 1.2 + 0.5 * n_layers * len(mixes)), 4)
    ax = figure.subplots()
    width = 0.8 / n_layers
    positions = numpy.arange(len(mixes))
    for layer in range(n_layers):
        heights = [mix.weights[layer] if layer < len(mix.weights) else 0.0 for mix in mixes.values()]
        ax.bar(positions + (layer - (n_layers - 1) / 2) * width, heights, width, label=f"layer {layer}")
    ax.axhline(1.0 / n_layers, color="black", linestyle="--", linewidth=1, label="uniform")
    ax.set_xticks(positions, [f"{name}\nγ = {mix.gamma:.3f}" for name, mix in mixes.items()])
    ax.set_ylabel("softmax(s)")
    ax.set_title("Learned ELMo layer weights per component")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return figure


def plot_mix_weights(pipeline: PathLike, output: PathLike) -> Path:
    """The layer weights of every trained ELMo mix of a saved spaCy pipeline in one PNG."""
    import spacy

    return save_png(mix_weights_figure(pipeline_mixes(spacy.load(pipeline))), output)


# sense maps


def sense_map_figure(sense: SenseMap, annotate: bool = True) -> Any:
    """The uses of a word on the first two PCA axes, coloured by group, the context-free
    (layer 0) vector as a star; with `annotate`, the use nearest each group's centre is
    labelled with its context."""
    figure = new_figure(8, 6)
    ax = figure.subplots()
    groups = list(dict.fromkeys(sense.groups))
    members = {group: numpy.array([g == group for g in sense.groups]) for group in groups}
    for number, group in enumerate(groups):
        points = sense.coordinates[members[group]]
        ax.scatter(points[:, 0], points[:, 1], s=22, alpha=0.75, color=f"C{number}", label=f"{group} ({len(points)})")
    ax.scatter(*sense.context_free, marker="*", s=260, color="black", label="layer 0 (context-free)")
    if annotate:
        for group in groups:
            _annotate_centre(ax, sense, numpy.flatnonzero(members[group]))
    uses = sense.uses
    ax.set_xlabel(f"PC 1 ({100 * sense.explained[0]:.0f}% of variance)")
    ax.set_ylabel(f"PC 2 ({100 * sense.explained[1]:.0f}% of variance)")
    ax.set_title(f"'{uses.word}': {len(uses)} uses on layer {uses.layer}")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return figure


def _annotate_centre(ax: Any, sense: SenseMap, indices: numpy.ndarray) -> None:
    points = sense.coordinates[indices]
    nearest = indices[numpy.argmin(((points - points.mean(axis=0)) ** 2).sum(axis=1))]
    right_half = sense.coordinates[nearest, 0] > numpy.mean(ax.get_xlim())
    ax.annotate(
        sense.uses.context(int(nearest), width=24),
        sense.coordinates[nearest],
        xytext=(-6 if right_half else 6, 6),
        textcoords="offset points",
        ha="right" if right_half else "left",
        fontsize=7,
        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8, "linewidth": 0.3},
    )


def plot_sense_map(sense: SenseMap, output: PathLike) -> Path:
    """A sense map (see `spacy_elmo.analysis.senses.sense_map`) as a PNG."""
    return save_png(sense_map_figure(sense), output)
