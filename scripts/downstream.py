"""The downstream twins: train a baseline and an ELMo spaCy pipeline for several seeds,
evaluate both on a test set, and write the comparison.

    python scripts/downstream.py train BASE.cfg ELMO.cfg OUTPUT_DIR --bilm MODEL --train T.spacy --dev D.spacy --seeds 0,1 --max-steps 2500
    python scripts/downstream.py evaluate OUTPUT_DIR TEST.spacy --output metrics/downstream.json --table metrics/downstream.md
    python scripts/downstream.py sample TRAIN.spacy SMALL.spacy --docs 1254 --seed 0
    python scripts/downstream.py sample TRAIN.spacy HALF_A.spacy --docs 6272 --rest HALF_B.spacy
    python scripts/downstream.py lines HALF_A.spacy HALF_A.txt

`sample` draws a seeded random share of a training DocBin, for the twins at less task data
(UD EWT's training file is ordered by genre, so its first docs are not a fair share).

Runs go to OUTPUT_DIR/base/seedN and OUTPUT_DIR/ELMO_ARM/seedN (`--elmo-arm`, "elmo" by
default, names the folder so that the runs of several biLMs share one baseline). Each run
trains in a process of its own with `spacy train`'s loop, the two arms with identical
overrides (seed, step budget, data, and a callback that logs epoch times and peak RSS). A
run that finished with the same inputs is not trained again, so an interrupted `train`
continues with the next unfinished run (an interrupted run restarts); `--arms base` and
`--arms elmo` in two processes train one seed's arms side by side. `--set KEY=VALUE`
overrides both arms' configs alike (a wider tok2vec for both, say) and is one of the
inputs; so is `--static-vectors DIR` (a pipeline with vectors, as `spacy init vectors` or
scripts/static_vectors.py writes it), which both arms' embeds then read beside their hash
embeddings: the twins against a base with static vectors. `--elmo-layers FILE` (the ELMo
arm alone, like its biLM, and one of its inputs) gives it training layers computed ahead
of time by `dump --all` (a cross-fitted adaptation's: `sample --rest` splits the training
docs in halves, `lines` writes a half's docs as the component reads them). A run finished
with other inputs (another biLM, data, budget, override or vectors) is never replaced
unasked: `train` refuses before training anything, naming the runs and what
differs; give each setting an OUTPUT_DIR (and each biLM an `--elmo-arm`) of its own, or
pass `--replace`. `evaluate` compares only runs trained alike: within an arm every seed
must share its inputs, and each seed's two arms their step budget, data, overrides and
static vectors.
"""

import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import typer

ARMS = ("base", "elmo")
METRICS = ("tag_acc", "pos_acc", "morph_acc", "dep_uas", "dep_las")
"""spaCy's scores: XPOS, UPOS, morphological features, unlabelled and labelled attachment."""
RUN_FILE = "run.json"
SCORES_FILE = "test-scores.json"

app = typer.Typer(add_completion=False, no_args_is_help=True)


def write_whole(path: Path, text: str) -> None:
    """`text` to `path`, whole or not at all (imported on use: spacy_elmo loads torch)."""
    write_bytes_whole(path, text.encode("utf-8"))


def write_bytes_whole(path: Path, data: bytes) -> None:
    """`data` to `path`, whole or not at all; a one-line error naming `path` where it
    cannot be written (a folder, a full disk)."""
    from spacy_elmo.cli.app import clean_errors
    from spacy_elmo.io.staging import write_atomically

    with clean_errors():
        write_atomically(path, lambda out: out.write(data))


def fingerprint(path: Path) -> str:
    """One digest of the names and contents of a file or of every file in a folder
    (`spacy_elmo.io.digests.tree_digest`, imported on use as above)."""
    from spacy_elmo.io.digests import tree_digest

    return tree_digest(path)


def run_inputs(
    config: str,
    seed: int,
    max_steps: int,
    train: str,
    dev: str,
    bilm: Optional[str],
    layers: List[str],
    settings: Dict[str, Any],
    static_vectors: Optional[str] = None,
) -> Dict[str, Any]:
    """What a run depends on (the files as their `fingerprint`s): a finished run with the
    same inputs is not repeated."""
    inputs: Dict[str, Any] = {"config": config, "seed": seed, "max_steps": max_steps, "train": train, "dev": dev}
    if bilm is not None:
        inputs["bilm"] = bilm
    if layers:
        inputs["elmo_layers"] = layers
    if settings:
        inputs["overrides"] = settings
    if static_vectors is not None:
        inputs["static_vectors"] = static_vectors
    return inputs


INPUT_NAMES = {
    "config": "config",
    "seed": "seed",
    "max_steps": "step budget",
    "train": "training data",
    "dev": "dev data",
    "bilm": "biLM",
    "elmo_layers": "precomputed layers",
    "overrides": "--set overrides",
    "static_vectors": "static vectors",
}
"""How messages name a run's inputs."""


def differing_inputs(records: List[Dict[str, Any]], ignore: Tuple[str, ...] = ()) -> List[str]:
    """The inputs (INPUT_NAMES keys) on which the runs' recorded inputs do not all agree."""
    keys = {key for record in records for key in record["inputs"]} - set(ignore)
    return [key for key in INPUT_NAMES if key in keys and len({json.dumps(r["inputs"].get(key), sort_keys=True) for r in records}) > 1]


def parse_settings(items: List[str]) -> Dict[str, Any]:
    """`--set KEY=VALUE` items as spaCy config overrides, each VALUE read as JSON."""
    settings = {}
    for item in items:
        key, equals, value = item.partition("=")
        message = f"--set takes KEY=VALUE with VALUE in JSON (a string in double quotes), got {item!r}"
        if not key or not equals:
            raise typer.BadParameter(message)
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError as err:
            raise typer.BadParameter(message) from err
    return settings


def static_vector_overrides(config: Path, vectors: Path) -> Dict[str, Any]:
    """The overrides that make `config` read the static vectors of the pipeline `vectors`:
    `paths.vectors` (read by `[initialize] vectors`) and every `include_static_vectors`
    switched on (the baseline's embed, the ELMo arm's `embed.features`)."""
    import numpy
    from thinc.api import Config

    try:
        rows = numpy.load(vectors / "vocab" / "vectors", mmap_mode="r", allow_pickle=False).shape[0]
    except (OSError, ValueError) as err:
        raise typer.BadParameter(
            f"{vectors} is not a pipeline with vectors: make one with `python -m spacy init vectors LANG VECTORS.vec {vectors}` (or scripts/static_vectors.py)"
        ) from err
    if rows == 0:
        raise typer.BadParameter(f"{vectors} holds no vectors (a table of 0 rows): give a pipeline whose vocab has vectors")
    switches = [f"{section}.include_static_vectors" for section in sections_with(Config().from_disk(config, interpolate=False), "include_static_vectors")]
    if not switches:
        raise typer.BadParameter(f"{config} has no embed that reads static vectors (no include_static_vectors setting)")
    return {"paths.vectors": str(vectors), **dict.fromkeys(switches, True)}


def sections_with(config: Dict[str, Any], key: str, prefix: str = "") -> List[str]:
    """The dotted names of the sections of `config` (nested dicts) that hold `key`."""
    names = [prefix[:-1]] if key in config and prefix else []
    for name, value in config.items():
        if isinstance(value, dict):
            names += sections_with(value, key, f"{prefix}{name}.")
    return names


def read_run_record(run_dir: Path) -> Dict[str, Any]:
    """The run.json of `run_dir` ({} where there is none); a one-line error naming it where
    it is not a run's record (damaged, or written by something else)."""
    path = run_dir / RUN_FILE
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise typer.BadParameter(f"{path}: not a run record ({err}); remove the run's folder to train it again") from err
    if not isinstance(record, dict) or ("inputs" in record and not isinstance(record.get("seed"), int)):
        raise typer.BadParameter(f"{path}: not a run record (no seed); remove the run's folder to train it again")
    return record


def finished_inputs(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The inputs of the run `train` finished in `run_dir`; None where there is none (never
    started, or interrupted before `train` recorded them)."""
    return read_run_record(run_dir).get("inputs")


def overrides(seed: int, max_steps: int, train: Path, dev: Path, bilm: Optional[Path], layers: List[Path], epochs_log: Path) -> Dict[str, Any]:
    """The same for both arms, but for the biLM's path and its precomputed layers."""
    values: Dict[str, Any] = {
        "system.seed": seed,
        "training.max_steps": max_steps,
        "paths.train": str(train),
        "paths.dev": str(dev),
        "training.before_update": {"@callbacks": "spacy-elmo.epoch_times.v1", "path": str(epochs_log)},
    }
    if bilm is not None:
        values["paths.elmo"] = str(bilm)
    if layers:
        values["initialize.after_init"] = {"@callbacks": "spacy-elmo.precomputed_layers.v1", "paths": [str(path) for path in layers]}
    return values


@app.command()
def train(
    base_config: Path = typer.Argument(..., help="The baseline arm's spaCy training config"),
    elmo_config: Path = typer.Argument(..., help="The ELMo arm's config (paths.elmo is set to --bilm)"),
    output_dir: Path = typer.Argument(..., help="Runs go to OUTPUT_DIR/ARM/seedN"),
    bilm: Path = typer.Option(..., help="The biLM: a model directory, a pipeline with an elmo component"),
    train_path: Path = typer.Option(..., "--train", help="Training DocBin"),
    dev_path: Path = typer.Option(..., "--dev", help="Development DocBin (spaCy's model-best is chosen on it)"),
    seeds: str = typer.Option("0,1", help="Comma-separated seeds"),
    max_steps: int = typer.Option(2500, min=1, help="spaCy training steps per run"),
    elmo_arm: str = typer.Option("elmo", help="Folder of the ELMo arm's runs in OUTPUT_DIR"),
    elmo_layers: List[Path] = typer.Option(
        [],
        "--elmo-layers",
        help="A `dump --all` file whose sentences' layers the ELMo arm reads in place of the biLM's while it trains "
        "(repeatable; the cross-fitted adaptation's training layers)",
    ),
    setting: List[str] = typer.Option(
        [],
        "--set",
        help="KEY=VALUE override of both arms' configs (VALUE in JSON), e.g. components.tok2vec.model.encode.width=192; "
        "one of a run's inputs, so give each setting its own OUTPUT_DIR",
    ),
    static_vectors: Optional[Path] = typer.Option(
        None,
        help="A pipeline with static vectors (`spacy init vectors`) that both arms' embeds read beside their hash embeddings; "
        "one of a run's inputs, so give the runs with it an OUTPUT_DIR of their own",
    ),
    replace: bool = typer.Option(
        False, "--replace", help="Train again the runs of OUTPUT_DIR finished with other inputs (without it, train refuses to replace them)"
    ),
    arms: str = typer.Option(
        "base,elmo",
        help="Comma-separated arms to train: 'base', 'elmo' or both; two processes with --arms base and --arms elmo train one seed's twins side by side",
    ),
) -> None:
    """Train every (arm, seed) run not yet finished with these inputs."""
    seed_list = parse_seeds(seeds)
    arm_list = parse_arms(arms)
    settings = parse_settings(setting)
    vectors = [] if static_vectors is None else [static_vectors]
    for path in (base_config, elmo_config, train_path, dev_path, bilm, *elmo_layers, *vectors):
        if not path.exists():
            raise typer.BadParameter(f"{path} not found")
    configs = {"base": base_config, "elmo": elmo_config}
    if static_vectors is not None:
        for config in configs.values():
            static_vector_overrides(config, static_vectors)  # refuses before anything trains
    folders = arm_folders(elmo_arm)
    digests = {path: fingerprint(path) for path in {base_config, elmo_config, train_path, dev_path, bilm, *elmo_layers, *vectors}}
    vectors_digest = None if static_vectors is None else digests[static_vectors]
    runs = []
    for seed in seed_list:
        for arm in arm_list:
            arm_bilm = digests[bilm] if arm == "elmo" else None
            arm_layers = [digests[path] for path in elmo_layers] if arm == "elmo" else []
            inputs = run_inputs(digests[configs[arm]], seed, max_steps, digests[train_path], digests[dev_path], arm_bilm, arm_layers, settings, vectors_digest)
            runs.append((arm, seed, output_dir / folders[arm] / f"seed{seed}", inputs))
    if not replace:
        refuse_to_replace(runs)
    for number, (arm, seed, run_dir, inputs) in enumerate(runs, start=1):
        if finished_inputs(run_dir) == inputs:
            typer.echo(f"[{number}/{len(runs)}] {arm} seed {seed}: done before, skipped")
            continue
        typer.echo(f"[{number}/{len(runs)}] {arm} seed {seed}: training {max_steps} steps in {run_dir}")
        shutil.rmtree(run_dir, ignore_errors=True)
        command = [
            sys.executable,
            __file__,
            "run",
            str(configs[arm]),
            str(run_dir),
            "--seed",
            str(seed),
            "--max-steps",
            str(max_steps),
            "--train",
            str(train_path),
            "--dev",
            str(dev_path),
        ]
        if arm == "elmo":
            command += ["--bilm", str(bilm)]
            for path in elmo_layers:
                command += ["--elmo-layers", str(path)]
        for item in setting:
            command += ["--set", item]
        if static_vectors is not None:
            command += ["--static-vectors", str(static_vectors)]
        result = subprocess.run(command)
        if result.returncode != 0:
            raise typer.Exit(result.returncode)
        record = read_run_record(run_dir)
        record["inputs"] = inputs
        write_whole(run_dir / RUN_FILE, json.dumps(record, indent=2))


def refuse_to_replace(runs: List[Tuple[str, int, Path, Dict[str, Any]]]) -> None:
    """Raise, naming each run and what differs, where a planned (arm, seed, run_dir, inputs)
    run would replace one finished with other inputs."""
    conflicts = []
    for _, _, run_dir, inputs in runs:
        finished = finished_inputs(run_dir)
        if finished is not None and finished != inputs:
            differing = differing_inputs([{"inputs": finished}, {"inputs": inputs}])
            conflicts.append(f"{run_dir} (other {', '.join(INPUT_NAMES[key] for key in differing)})")
    if conflicts:
        raise typer.BadParameter(
            "these runs were finished with other inputs and would be replaced: "
            + "; ".join(conflicts)
            + ". Give them an OUTPUT_DIR of their own (another biLM: an --elmo-arm of its own), or pass --replace to train them again"
        )


@app.command(hidden=True)
def run(
    config: Path,
    run_dir: Path,
    seed: int = typer.Option(...),
    max_steps: int = typer.Option(...),
    train_path: Path = typer.Option(..., "--train"),
    dev_path: Path = typer.Option(..., "--dev"),
    bilm: Optional[Path] = typer.Option(None),
    elmo_layers: List[Path] = typer.Option([], "--elmo-layers"),
    setting: List[str] = typer.Option([], "--set", help='KEY=VALUE config override (VALUE in JSON), e.g. components.elmo.layer_cache="never"'),
    static_vectors: Optional[Path] = typer.Option(None, help="A pipeline with static vectors that the config's embeds read"),
) -> None:
    """One run, in this process: spacy train, then its seconds and peak RSS in run.json."""
    from spacy.cli.train import train as spacy_train

    import spacy_elmo  # noqa: F401  (registers the callback)
    from spacy_elmo.pipeline.callbacks import peak_rss_mb

    epochs_log = run_dir / "epochs.jsonl"
    start = time.perf_counter()
    extra = parse_settings(setting)
    if static_vectors is not None:
        extra = {**static_vector_overrides(config, static_vectors), **extra}
    spacy_train(config, run_dir, overrides={**overrides(seed, max_steps, train_path, dev_path, bilm, elmo_layers, epochs_log), **extra})
    seconds = time.perf_counter() - start
    epochs = [json.loads(line) for line in epochs_log.read_text().splitlines() if line.strip()]
    record = {"seed": seed, "max_steps": max_steps, "train_seconds": seconds, "peak_rss_mb": peak_rss_mb(), "epochs": epochs}
    write_whole(run_dir / RUN_FILE, json.dumps(record, indent=2))


@app.command()
def evaluate(
    output_dir: Path = typer.Argument(..., help="The folder `train` wrote"),
    test_path: Path = typer.Argument(..., help="Test DocBin"),
    output: Path = typer.Option(Path("metrics/downstream.json"), help="Every run's figures and the summary"),
    table: Path = typer.Option(Path("metrics/downstream.md"), help="The summary as a markdown table"),
    elmo_arm: str = typer.Option("elmo", help="Folder of the ELMo arm's runs in OUTPUT_DIR"),
) -> None:
    """`spacy evaluate` the model-best of each seed finished in both arms with the same step
    budget and data on the test set, then compare the arms."""
    import spacy

    from spacy_elmo.pipeline import learned_mixes

    if not test_path.is_file():
        raise typer.BadParameter(f"{test_path} not found")
    folders = arm_folders(elmo_arm)
    finished = {arm: finished_runs(output_dir / folders[arm]) for arm in ARMS}
    seeds = paired_seeds(finished["base"], finished["elmo"], folders)
    if not seeds:
        raise typer.BadParameter(f"{output_dir} holds no seed finished in both {folders['base']} and {folders['elmo']}: run `train` first")
    test_set = fingerprint(test_path)
    arms: Dict[str, List[Dict[str, Any]]] = {arm: [] for arm in ARMS}
    mixes: Dict[str, Any] = {}
    for arm in ARMS:
        for seed in seeds:
            run_dir = output_dir / folders[arm] / f"seed{seed}"
            record = finished[arm][seed]
            figures = scores_on_test_set(run_dir / "model-best", test_path, test_set, run_dir / SCORES_FILE)
            missing = [metric for metric in METRICS if figures.get(metric) is None]
            if missing:
                raise typer.BadParameter(
                    f"spacy evaluate gave no {', '.join(missing)} for {run_dir / 'model-best'} on {test_path}: the twins compare "
                    "pipelines with a tagger, a morphologizer and a parser on a test set annotated for all three"
                )
            arms[arm].append(
                {
                    "seed": seed,
                    **{metric: figures[metric] for metric in METRICS},
                    "train_seconds": record["train_seconds"],
                    "words_per_second": figures["speed"],
                    "peak_rss_mb": record["peak_rss_mb"],
                    "epochs": record["epochs"],
                }
            )
            if arm == "elmo":
                learned = learned_mixes(spacy.load(run_dir / "model-best"))
                mixes[f"seed{seed}"] = [mix._asdict() for mix in learned]
                for mix in learned:
                    weights = ", ".join(f"{w:.3f}" for w in mix.weights)
                    typer.echo(f"elmo seed {seed}, {mix.component}: layer weights [{weights}], gamma {mix.gamma:.3f}")
    summary = summarize(arms)
    write_whole(output, json.dumps({"runs": arms, "summary": summary, "mixes": mixes}, indent=2))
    markdown = summary_table(summary, {arm: len(runs) for arm, runs in arms.items()})
    write_whole(table, markdown)
    typer.echo(markdown)


def finished_runs(arm_dir: Path) -> Dict[int, Dict[str, Any]]:
    """Seed -> run.json of each run in an arm's folder that `train` finished (it records the inputs)."""
    runs = {}
    for run_dir in arm_dir.glob("seed*"):
        record = read_run_record(run_dir)
        if "inputs" in record:
            runs[record["seed"]] = record
    return runs


SHARED_INPUTS = ("max_steps", "train", "dev", "overrides", "static_vectors")
"""What the two arms of every compared seed must share: the config and the biLM are what differ."""


def paired_seeds(base: Dict[int, Dict[str, Any]], elmo: Dict[int, Dict[str, Any]], folders: Dict[str, str]) -> List[int]:
    """The seeds whose two runs were trained with the same step budget, data, overrides
    and static vectors (the arms differ only by their config and biLM), left-out seeds named; refuses where the
    compared runs of one arm differ in anything but the seed (another biLM, config, budget,
    data or overrides), whose figures a mean over seeds would mix."""
    seeds: List[int] = []
    left_out: List[int] = []
    for seed in sorted(base.keys() & elmo.keys()):
        differing = differing_inputs([base[seed], elmo[seed]])
        (left_out if set(differing) & set(SHARED_INPUTS) else seeds).append(seed)
    if left_out:
        typer.echo(f"left out: seeds {left_out}, whose base and ELMo runs were trained with other step budgets, data, overrides or static vectors")
    for arm, records in (("base", base), ("elmo", elmo)):
        differing = differing_inputs([records[seed] for seed in seeds], ignore=("seed",))
        if differing:
            budgets = sorted({records[seed]["inputs"]["max_steps"] for seed in seeds})
            raise typer.BadParameter(
                f"the {folders[arm]} runs of seeds {seeds} differ in their {', '.join(INPUT_NAMES[key] for key in differing)} "
                f"(step budgets: {budgets}), which a mean over seeds would mix: give each setting its own output folder "
                "(and each biLM its own --elmo-arm)"
            )
    return seeds


def scores_on_test_set(model: Path, test_path: Path, test_set: str, scores: Path) -> Dict[str, Any]:
    """`spacy evaluate`'s scores of `model` on the test set whose fingerprint is `test_set`,
    from the file `scores` where it holds them for this model and test set."""
    if scores.is_file() and scores.stat().st_mtime >= model.stat().st_mtime:
        figures = json.loads(scores.read_text())
        if figures.get("test_set") == test_set:
            return figures
    subprocess.run([sys.executable, "-m", "spacy", "evaluate", str(model), str(test_path), "--output", str(scores)], check=True)
    figures = {**json.loads(scores.read_text()), "test_set": test_set}
    write_whole(scores, json.dumps(figures, indent=2))
    return figures


@app.command()
def sample(
    train_path: Path = typer.Argument(..., help="Training DocBin to draw from"),
    output: Path = typer.Argument(..., help="The sample, a DocBin"),
    docs: int = typer.Option(..., min=1, help="How many docs to draw (without replacement)"),
    seed: int = typer.Option(0, help="Seed of the draw"),
    rest: Optional[Path] = typer.Option(None, help="Also write the docs not drawn here (a DocBin): the two halves of a cross-fitted adaptation"),
) -> None:
    """Write DOCS docs of TRAIN_PATH drawn at random (in their original order) to OUTPUT,
    and with --rest the others (in their original order) to REST."""
    import spacy
    from spacy.tokens import DocBin

    from spacy_elmo.cli.app import clean_errors
    from spacy_elmo.io.staging import refuse_writing_over_inputs

    with clean_errors():
        refuse_writing_over_inputs(output, [train_path])
        if rest is not None:
            refuse_writing_over_inputs(rest, [train_path, output])
    source = read_docbin(train_path)
    if docs > len(source):
        raise typer.BadParameter(f"--docs {docs} is more than the {len(source)} docs in {train_path}")
    all_docs = list(source.get_docs(spacy.blank("xx").vocab))
    chosen = sorted(random.Random(seed).sample(range(len(all_docs)), docs))
    write_bytes_whole(output, DocBin(docs=[all_docs[i] for i in chosen], store_user_data=True).to_bytes())
    words = sum(len(all_docs[i]) for i in chosen)
    typer.echo(f"{docs} of {len(all_docs)} docs ({words:,} words) drawn with seed {seed} into {output}")
    if rest is not None:
        drawn = set(chosen)
        others = [doc for i, doc in enumerate(all_docs) if i not in drawn]
        write_bytes_whole(rest, DocBin(docs=others, store_user_data=True).to_bytes())
        typer.echo(f"the other {len(others)} docs ({sum(len(d) for d in others):,} words) into {rest}")


@app.command()
def lines(
    docbin: Path = typer.Argument(..., help="A DocBin"),
    output: Path = typer.Argument(..., help="Text, one doc per line"),
    lang: str = typer.Option("en", help="The language of the pipeline whose training reads DOCBIN"),
) -> None:
    """Write each doc of DOCBIN as one line of the tokens the elmo component reads in
    `spacy train` (the doc as spaCy's corpus reader gives it to the pipeline: the text
    tokenized by LANG's tokenizer; whitespace tokens left out, tokens joined by spaces):
    the input of `dump --all` for the twins' --elmo-layers."""
    from spacy.training import Corpus

    from spacy_elmo.cli.app import clean_errors
    from spacy_elmo.io.staging import refuse_writing_over_inputs
    from spacy_elmo.languages import blank_language

    with clean_errors():
        refuse_writing_over_inputs(output, [docbin])
        nlp = blank_language(lang)
    read_docbin(docbin)  # spaCy's reader only warns about a file that is not a DocBin
    texts = [" ".join(t.text for t in example.predicted if not t.is_space) for example in Corpus(docbin)(nlp)]
    write_whole(output, "".join(f"{text}\n" for text in texts if text))
    typer.echo(f"{len(texts)} docs into {output}")


def read_docbin(path: Path) -> Any:
    """The DocBin at `path`; a one-line error where it is missing or not a DocBin."""
    from spacy.tokens import DocBin

    if not path.is_file():
        raise typer.BadParameter(f"{path} not found")
    try:
        return DocBin().from_disk(path)
    except ValueError as err:  # spaCy's E1014, with a traceback behind it otherwise
        raise typer.BadParameter(f"{path}: not a DocBin (.spacy) file") from err


def arm_folders(elmo_arm: str) -> Dict[str, str]:
    if not elmo_arm or elmo_arm == "base" or "/" in elmo_arm:
        raise typer.BadParameter(f"--elmo-arm must be a folder name other than 'base', got {elmo_arm!r}")
    return {"base": "base", "elmo": elmo_arm}


def parse_arms(arms: str) -> List[str]:
    """`--arms` as a list in the order of ARMS."""
    chosen = {a.strip() for a in arms.split(",") if a.strip()}
    if not chosen or not chosen <= set(ARMS):
        raise typer.BadParameter(f"--arms must list 'base', 'elmo' or both, comma-separated, got {arms!r}")
    return [arm for arm in ARMS if arm in chosen]


def parse_seeds(seeds: str) -> List[int]:
    try:
        values = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError as err:
        raise typer.BadParameter(f"--seeds must be comma-separated integers, got {seeds!r}") from err
    if not values or len(set(values)) != len(values):
        raise typer.BadParameter(f"--seeds must list distinct integers, got {seeds!r}")
    return values


def mean_sd(values: List[float]) -> Dict[str, float]:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0}


def later_epoch_seconds(runs: List[Dict[str, Any]]) -> Optional[float]:
    """Mean seconds of the finished epochs after the first, over all runs (None without any)."""
    seconds = [epoch["seconds"] for run in runs for epoch in run["epochs"] if epoch["epoch"] > 0]
    return statistics.fmean(seconds) if seconds else None


def summarize(arms: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """Mean and sd per arm; the ELMo arm's relative error reduction on each accuracy."""
    summary: Dict[str, Any] = {arm: {} for arm in arms}
    for arm, runs in arms.items():
        for key in (*METRICS, "train_seconds", "words_per_second", "peak_rss_mb"):
            summary[arm][key] = mean_sd([run[key] for run in runs])
        first = [run["epochs"][0]["seconds"] for run in runs if run["epochs"]]
        summary[arm]["first_epoch_seconds"] = statistics.fmean(first) if first else None
        summary[arm]["later_epoch_seconds"] = later_epoch_seconds(runs)
    summary["relative_error_reduction"] = {
        metric: relative_error_reduction(summary["base"][metric]["mean"], summary["elmo"][metric]["mean"]) for metric in METRICS
    }
    summary["paired"] = paired_by_seed(arms)
    return summary


def paired_by_seed(arms: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Dict[str, Any]]:
    """Per metric, the ELMo run's gain over the base run of the same seed (in accuracy, as
    fractions): mean, sd and standard error over the seeds, the smallest and largest gain,
    how many seeds gain, and each seed's own relative error reduction (None where its base
    run makes no error). The seeds' spread of the gain is the comparison's own noise."""
    base = {run["seed"]: run for run in arms["base"]}
    paired: Dict[str, Dict[str, Any]] = {}
    for metric in METRICS:
        gains = [run[metric] - base[run["seed"]][metric] for run in arms["elmo"]]
        spread = mean_sd(gains)
        paired[metric] = {
            **spread,
            "se": spread["sd"] / len(gains) ** 0.5,
            "min": min(gains),
            "max": max(gains),
            "seeds_ahead": sum(gain > 0 for gain in gains),
            "seeds": len(gains),
            "reduction_by_seed": [relative_error_reduction(base[run["seed"]][metric], run[metric]) for run in arms["elmo"]],
        }
    return paired


def relative_error_reduction(base: float, elmo: float) -> Optional[float]:
    """(error_base - error_elmo) / error_base for accuracies in [0, 1]; None where the
    baseline makes no error (no reduction is defined)."""
    return ((1.0 - base) - (1.0 - elmo)) / (1.0 - base) if base < 1.0 else None


def summary_table(summary: Dict[str, Any], n_runs: Dict[str, int]) -> str:
    lines = [
        f"| metric (test) | base ({n_runs['base']} seeds) | elmo ({n_runs['elmo']} seeds) | relative error reduction |",
        "|---|---|---|---|",
    ]
    for metric in METRICS:
        base, elmo = summary["base"][metric], summary["elmo"][metric]
        rer = summary["relative_error_reduction"][metric]
        reduction = "n/a (the baseline makes no error)" if rer is None else f"{100 * rer:+.1f}%"
        lines.append(f"| `{metric}` | {100 * base['mean']:.2f} ± {100 * base['sd']:.2f} | {100 * elmo['mean']:.2f} ± {100 * elmo['sd']:.2f} | {reduction} |")
    for key, label in (("train_seconds", "training seconds"), ("words_per_second", "words/s at prediction"), ("peak_rss_mb", "peak RSS in training (MiB)")):
        base, elmo = summary["base"][key], summary["elmo"][key]
        lines.append(f"| {label} | {base['mean']:,.0f} ± {base['sd']:,.0f} | {elmo['mean']:,.0f} ± {elmo['sd']:,.0f} | |")
    for key, label in (("first_epoch_seconds", "seconds, first epoch"), ("later_epoch_seconds", "seconds per later epoch")):
        base, elmo = summary["base"][key], summary["elmo"][key]
        if base is not None and elmo is not None:
            lines.append(f"| {label} | {base:,.1f} | {elmo:,.1f} | ×{elmo / base:.2f} |")
    lines += [
        "",
        "| paired by seed | elmo − base, points (mean ± se) | smallest, largest | seeds ahead | reduction by seed |",
        "|---|---|---|---|---|",
    ]
    for metric in METRICS:
        pair = summary["paired"][metric]
        reductions = [value for value in pair["reduction_by_seed"] if value is not None]
        by_seed = f"{100 * min(reductions):+.1f}% to {100 * max(reductions):+.1f}%" if reductions else "n/a"
        lines.append(
            f"| `{metric}` | {100 * pair['mean']:+.2f} ± {100 * pair['se']:.2f} | {100 * pair['min']:+.2f}, {100 * pair['max']:+.2f} "
            f"| {pair['seeds_ahead']} of {pair['seeds']} | {by_seed} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    app()
