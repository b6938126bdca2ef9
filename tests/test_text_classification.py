"""Text classification from YAML alone: the synthetic set, the text inputters and their vocabulary,
the text networks, the shared classification modeler, and the shipped pipeline through the CLI.

Unit tests build the components in this process on tiny files; the end-to-end tests run
`dslrun` as a user does on data from `dslrun data synthetic-text`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")

from dsl.language.context import BuildContext, Placement
from dsl.language.errors import DslError
from dsl.language.registry import lookup
from dsl.tasks.text_classification._synthetic_data import TextSpec, class_phrase, generate, write
from dsl.tasks.text_classification._text import VOCABULARY_FILE

from e2e_support import DSLRUN, ENV, MULTIRANK_ENV, dslrun, kill_group, sigkill_when

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "pipelines" / "text_classification.yaml"


def context(run: Path, rank: int = 0, world_size: int = 1) -> BuildContext:
    return BuildContext(model_dir=run, placement=Placement(rank=rank, world_size=world_size))


def build(type_: str, run: Path, rank: int = 0, fresh_start: bool = False, **params):
    """An inputter built through the registry, after checking its section against the schema."""
    section = {"type": type_, "num_classes": 3, **params}
    jsonschema.Draft202012Validator(lookup("inputter", type_).schema()).validate(section)
    built_with = context(run, rank)
    built_with.fresh_start = fresh_start
    return lookup("inputter", type_).builder(section, built_with)


def write_csv(path: Path, rows: list[tuple[str, object]], header: tuple[str, ...] = ("text", "label")) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


ROWS = [("good goal, referee", 0), ("rain and drizzle", 1), ('a "quoted"\nrecipe', 2), ("café goal", 0),
        ("thunder today", 1), ("oven flavour", 2), ("goal goal", 0), ("drizzle", 1)]


@pytest.fixture
def train_csv(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "train.csv", ROWS)


def vocabulary(run: Path) -> list[str]:
    return json.loads((run / VOCABULARY_FILE).read_text(encoding="utf-8"))["tokens"]


# --------------------------------------------------------------------------------- the synthetic set
def test_synthetic_text_is_rfc4180_csv_with_text_that_exercises_a_reader(tmp_path: Path) -> None:
    spec = TextSpec(num_train=300, num_val=60, num_classes=4, seed=1)
    written, counts = write(tmp_path / "set", spec)
    assert written and counts == {"train": 300, "eval": 60}
    with open(tmp_path / "set" / "train.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["text", "label"] and len(rows) == 301
    assert rows[1:] == [[text, str(label)] for text, label in generate(300, spec, 0)]
    texts = [text for text, _ in rows[1:]]
    assert any("," in t for t in texts) and any('"' in t for t in texts) and any("\n" in t for t in texts)
    assert any(not t.isascii() for t in texts)
    assert sorted({int(label) for _, label in rows[1:]}) == [0, 1, 2, 3]
    # Some texts carry their class only as a two-word phrase whose words alone say nothing.
    phrase = " ".join(class_phrase(0))
    assert any(phrase in t.lower().replace(",", "").replace("\n", " ") for t, label in rows[1:] if label == "0")
    assert (tmp_path / "set" / "classes.txt").read_text().split() == ["sports", "weather", "food", "music"]


def test_synthetic_text_rerun_skips_a_complete_set_and_redoes_an_interrupted_one(tmp_path: Path) -> None:
    spec = TextSpec(num_train=20, num_val=10, num_classes=3, seed=0)
    out = tmp_path / "set"
    assert write(out, spec)[0]
    before = (out / "train.csv").read_bytes()
    assert not write(out, spec)[0]
    (out / "train.csv").unlink()  # as a run killed before its last write leaves it
    assert write(out, spec)[0] and (out / "train.csv").read_bytes() == before
    assert write(out, TextSpec(num_train=20, num_val=10, num_classes=3, seed=1))[0]  # other settings: written again
    assert (out / "train.csv").read_bytes() != before


# ------------------------------------------------------------------------------------- CSV errors
BAD_CSVS = {
    "bad encoding": (b"text,label\nfine,0\ncaf\xe9 latin-1,1\n", "line 3: not UTF-8 text"),
    "missing column": (b"body,label\nhello,0\n", "line 1: the header has no column 'text'"),
    "wrong number of fields": (b"text,label\nhello,0\nhello, world,1\n", "line 3: expected 2 fields as in the header, found 3"),
    "label outside the classes": (b"text,label\nhello,0\n\"two\nlines\",1\nbye,3\n", "line 5: label 3 is outside 0..2"),
    "label not an integer": (b"text,label\nhello,zero\n", "line 2: label 'zero' is not an integer"),
    "unterminated quote": (b'text,label\nhello,0\n"never closed,1\n', "line 3: unexpected end of data"),
}


@pytest.mark.parametrize("name", list(BAD_CSVS))
def test_each_csv_error_names_the_file_and_line(tmp_path: Path, train_csv: Path, name: str) -> None:
    content, expected = BAD_CSVS[name]
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    with pytest.raises(DslError) as error:
        build("text_classification_csv", tmp_path / "run", train=str(train_csv), val=str(bad))
    assert f"{bad} {expected}" in str(error.value)


def test_a_csv_error_is_one_line_from_the_cli(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(BAD_CSVS["wrong number of fields"][0])
    (tmp_path / "eval.csv").write_bytes(b"text,label\nhello,0\nbye,1\n")
    result = dslrun(*shipped_args(tmp_path / "run", bad.parent), "--set", f"inputter.train={bad}", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f'{bad}:3:1: error: expected 2 fields as in the header, found 3; a text holding commas must be '
        'quoted ("...", a quote inside doubled)')


def test_validate_data_reports_every_bad_row(tmp_path: Path, train_csv: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"text,label\nhello,0\nhello,7\nhello,1,1\nfine,2\n")
    result = dslrun("validate", "--data", str(SHIPPED), "--set", f"inputter.train={bad}",
                    "--set", f"inputter.val={train_csv}", check=False)
    assert result.returncode == 1
    assert f"{bad}:3:1" in result.stdout + result.stderr and f"{bad}:4:1" in result.stdout + result.stderr


def test_validate_data_sums_texts_up_and_warns_as_for_images(tmp_path: Path) -> None:
    """Class counts per split, a class without texts, and val texts copied from train."""
    train = write_csv(tmp_path / "train.csv", [("a goal", 0), ("more rain", 1), ("a goal", 0), ("late goal", 0)])
    val = write_csv(tmp_path / "val.csv", [("more rain", 1), ("a new oven", 2)])
    result = dslrun("validate", "--data", str(SHIPPED), "--set", f"inputter.train={train}",
                    "--set", f"inputter.val={val}", "--set", "inputter.batch_size=2", check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "inputter.train: 4 examples from" in out and "2 classes, 1-3 each" in out
    assert "class 2 (food) has no example in this split" in out
    assert "1 of 2 examples has the same content as a train example (val.csv line 2 = train.csv line 3)" in out


def test_labels_may_be_class_names_or_indices(tmp_path: Path) -> None:
    train = write_csv(tmp_path / "named.csv", [("a goal", "sports"), ("rain", 1), ("oven", "food")])
    inputter = build("text_classification_csv", tmp_path / "run", train=str(train), classes=["sports", "weather", "food"])
    assert inputter.arrays["train"][1].tolist() == [0, 1, 2]
    assert inputter.facts()["class_names"] == ["sports", "weather", "food"]
    unknown = write_csv(tmp_path / "unknown.csv", [("a goal", "sport")])
    with pytest.raises(DslError, match=r"line 2: label 'sport' is neither one of inputter.classes"):
        build("text_classification_csv", tmp_path / "run2", train=str(unknown), classes=["sports", "weather", "food"])


def test_columns_are_found_by_name(tmp_path: Path) -> None:
    train = write_csv(tmp_path / "t.csv", [(7, "0", "goal"), (8, "1", "rain"), (9, "2", "oven")],
                      header=("id", "stars", "review"))
    inputter = build("text_classification_csv", tmp_path / "run", train=str(train), text_column="review",
                     label_column="stars")
    assert inputter.num_examples("train") == 3 and inputter.arrays["train"][1].tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------- folder layout
def write_folder(root: Path, classes: dict[str, list[str]]) -> Path:
    for name, texts in classes.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for index, text in enumerate(texts):
            (root / name / f"{index}_1.txt").write_text(text, encoding="utf-8")
    return root


def test_folder_layout_reads_class_folders_as_imdb_has_them(tmp_path: Path) -> None:
    train = write_folder(tmp_path / "aclImdb" / "train", {"pos": ["great fun", "loved it"], "neg": ["awful", "boring plot"],
                                                          "unsup": ["no label"]})
    (train / "urls_pos.txt").write_text("http://example\n")  # a file beside the class folders is no text
    val = write_folder(tmp_path / "aclImdb" / "test", {"pos": ["fun"], "neg": ["dull"]})
    section = {"train": str(train), "val": str(val), "num_classes": 2, "classes": ["neg", "pos"]}
    inputter = build("text_folder", tmp_path / "run", **section)
    assert inputter.num_examples("train") == 4 and inputter.num_examples("val") == 2
    assert inputter.arrays["train"][1].tolist() == [0, 0, 1, 1]  # neg (sorted files), then pos
    assert inputter.facts()["class_names"] == ["neg", "pos"]
    with pytest.raises(DslError, match=r"inputter\.train: there are 3 classes"):  # without `classes`, unsup is a class
        build("text_folder", tmp_path / "run2", train=str(train), num_classes=2)


def test_folder_errors_name_the_folder_or_file(tmp_path: Path) -> None:
    train = write_folder(tmp_path / "train", {"a": ["x y"], "b": ["z"], "c": ["w"]})
    val = write_folder(tmp_path / "val", {"a": ["x"], "d": ["new class"]})
    with pytest.raises(DslError, match=r"inputter.val: .*val has a sub-folder 'd' that is not a known class"):
        build("text_folder", tmp_path / "run", train=str(train), val=str(val))
    (train / "b" / "latin1.txt").write_bytes(b"ok\ncaf\xe9")
    with pytest.raises(DslError, match=rf"{train / 'b' / 'latin1.txt'} line 2: not UTF-8 text"):
        build("text_folder", tmp_path / "run", train=str(train))


# ------------------------------------------------------------------------------------- vocabulary
def test_vocabulary_comes_from_train_only_and_is_saved_in_the_run_directory(tmp_path: Path, train_csv: Path) -> None:
    val = write_csv(tmp_path / "val.csv", [("zeppelin goal", 0)])
    run = tmp_path / "run"
    inputter = build("text_classification_csv", run, train=str(train_csv), val=str(val), sequence_length=6)
    tokens = vocabulary(run)
    assert tokens[:2] == ["", "[UNK]"] and "goal" in tokens and "café" in tokens and "zeppelin" not in tokens
    assert "," not in "".join(tokens) and "Café" not in tokens  # lowercased, punctuation stripped
    facts = inputter.facts()
    assert facts["vocabulary_size"] == len(tokens) and facts["sequence_length"] == 6 and facts["num_classes"] == 3
    ids = inputter.arrays["val"][0]
    assert ids.dtype == np.int32 and ids.shape == (1, 6)
    assert ids[0].tolist() == [1, tokens.index("goal"), 0, 0, 0, 0]  # unknown word -> 1, padding -> 0


def test_saved_vocabulary_is_read_back_not_rebuilt(tmp_path: Path, train_csv: Path) -> None:
    run = tmp_path / "run"
    first = build("text_classification_csv", run, train=str(train_csv))
    saved = vocabulary(run)
    write_csv(train_csv, [("entirely new words here", 0)] * 3)  # the train file changed since
    again = build("text_classification_csv", run, train=str(train_csv))
    assert again.vectorizer.get_vocabulary() == saved == first.vectorizer.get_vocabulary()
    assert "entirely" not in saved
    # eval / predict / export of a trained run need no train data at all
    no_train = build("text_classification_csv", run, val=str(train_csv))
    assert no_train.facts()["vocabulary_size"] == len(saved)
    # --no-resume starts over: the vocabulary is built anew from today's train texts, and saved
    fresh = build("text_classification_csv", run, fresh_start=True, train=str(train_csv), max_tokens=50)
    assert "entirely" in fresh.vectorizer.get_vocabulary() and vocabulary(run) == fresh.vectorizer.get_vocabulary()


def test_vocabulary_built_twice_is_identical_and_only_the_chief_writes_it(tmp_path: Path) -> None:
    spec = TextSpec(num_train=400, num_val=10, num_classes=3, seed=2)
    write(tmp_path / "set", spec)
    train = str(tmp_path / "set" / "train.csv")
    build("text_classification_csv", tmp_path / "a", train=train, ngrams=2, max_tokens=300)
    build("text_classification_csv", tmp_path / "b", train=train, ngrams=2, max_tokens=300)
    assert vocabulary(tmp_path / "a") == vocabulary(tmp_path / "b")
    assert len(vocabulary(tmp_path / "a")) == 300 and "quite bright" in vocabulary(tmp_path / "a")
    other_rank = build("text_classification_csv", tmp_path / "c", rank=1, train=train, ngrams=2, max_tokens=300)
    assert not (tmp_path / "c").exists()
    assert other_rank.vectorizer.get_vocabulary() == vocabulary(tmp_path / "a")


def test_a_saved_vocabulary_that_does_not_fit_the_settings_is_an_error(tmp_path: Path, train_csv: Path) -> None:
    run = tmp_path / "run"
    build("text_classification_csv", run, train=str(train_csv))
    with pytest.raises(DslError, match=r"built with inputter.max_tokens 20000 \(now 50\), inputter.ngrams 1 \(now 2\)"):
        build("text_classification_csv", run, train=str(train_csv), max_tokens=50, ngrams=2)
    build("text_classification_csv", run, train=str(train_csv), sequence_length=9)  # cuts or pads only: fine
    (run / VOCABULARY_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(DslError, match="cannot read the vocabulary"):
        build("text_classification_csv", run, train=str(train_csv))
    with pytest.raises(DslError, match=r"no vocabulary in .* and the inputter has no train data"):
        build("text_classification_csv", tmp_path / "fresh", val=str(train_csv))


# --------------------------------------------------------------------------------- datasets, predict
def test_datasets_are_int32_token_batches_sharded_before_shuffling(tmp_path: Path, train_csv: Path) -> None:
    inputter = build("text_classification_csv", tmp_path / "run", train=str(train_csv), batch_size=2,
                     sequence_length=5, drop_remainder=False)
    tokens, labels = next(iter(inputter.dataset("train", seed=1)))
    assert tokens.dtype == tf.int32 and tokens.shape == (2, 5) and labels.dtype == tf.int32
    shards = [sorted(tuple(row) for batch, _ in inputter.dataset("train", None, 2, index, seed=3) for row in batch.numpy())
              for index in range(2)]
    everything = sorted(tuple(row) for row in inputter.arrays["train"][0])
    assert sorted(shards[0] + shards[1]) == everything and len(shards[0]) == len(shards[1]) == 4
    orders = [[row.tolist() for batch, _ in inputter.dataset("train", seed=seed) for row in batch.numpy()] for seed in (1, 1, 2)]
    assert orders[0] == orders[1] != orders[2]


def test_predict_inputs_are_texts_and_the_lines_of_files(tmp_path: Path, train_csv: Path) -> None:
    inputter = build("text_classification_csv", tmp_path / "run", train=str(train_csv), sequence_length=4)
    lines = tmp_path / "lines.txt"
    lines.write_text("goal goal\r\n\nrain\n", encoding="utf-8")
    examples = inputter.predict_inputs([str(lines)], ["café goal"])
    assert [source for source, _ in examples] == [
        {"text": "café goal"}, {"file": str(lines), "line": 1, "text": "goal goal"}, {"file": str(lines), "line": 3, "text": "rain"}]
    assert all(features.dtype == tf.int32 and features.shape == (4,) for _, features in examples)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"caf\xe9\n")
    with pytest.raises(DslError) as error:
        inputter.predict_inputs([str(latin), str(tmp_path / "missing.txt")], [])
    assert str(error.value).splitlines() == [
        f"cannot read file {latin} line 1: not UTF-8 text (invalid continuation byte at byte 3); save the file as UTF-8",
        f"cannot read file {tmp_path / 'missing.txt'}: No such file or directory"]


def test_serving_input_takes_raw_strings(tmp_path: Path, train_csv: Path) -> None:
    inputter = build("text_classification_csv", tmp_path / "run", train=str(train_csv), sequence_length=4)
    [serving] = inputter.serving_inputs()
    assert serving.name == "text" and serving.spec == tf.TensorSpec([None], tf.string, name="text")
    assert serving.keep == [inputter.vectorizer]
    ids = serving.to_features(tf.constant(["Goal, GOAL!", "rain"]))
    assert ids.dtype == tf.int32 and ids.numpy().tolist() == inputter.vectorize(["goal goal", "rain"]).tolist()


# ------------------------------------------------------------------------------------------ networks
NETWORKS = {"text_cnn": {"filter_sizes": [2, 3], "num_filters": 4, "embedding_dim": 8},
            "bilstm": {"units": 4, "embedding_dim": 8, "dropout": 0.2},
            "embedding_bag": {"embedding_dim": 8, "hidden_units": 6}}


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_text_networks_map_token_ids_to_float32_logits(name: str, precision: str) -> None:
    network = lookup("network", name)
    jsonschema.Draft202012Validator(network.schema()).validate({"type": name, **NETWORKS[name]})
    built_with = BuildContext(num_classes=5, vocabulary_size=30, sequence_length=7)
    tf.keras.mixed_precision.set_global_policy(precision)
    try:
        model = network.builder({"type": name, **NETWORKS[name]}, built_with)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    tokens = tf.constant([[2, 3, 29, 0, 0, 0, 0], [0] * 7, [5] * 7], tf.int32)  # an empty text too
    logits = model(tokens, training=False)
    assert logits.shape == (3, 5) and logits.dtype == tf.float32
    assert np.isfinite(logits.numpy()).all()
    assert model.get_layer("embedding").input_dim == 30


def test_padding_changes_nothing_for_the_masked_networks() -> None:
    built_with = BuildContext(num_classes=3, vocabulary_size=20, sequence_length=6)
    for name in ("bilstm", "embedding_bag"):
        model = lookup("network", name).builder({"type": name, "embedding_dim": 4}, built_with)
        short = BuildContext(num_classes=3, vocabulary_size=20, sequence_length=3)
        same = lookup("network", name).builder({"type": name, "embedding_dim": 4}, short)
        same.set_weights(model.get_weights())
        long_logits = model(tf.constant([[4, 5, 6, 0, 0, 0]], tf.int32)).numpy()
        assert np.allclose(long_logits, same(tf.constant([[4, 5, 6]], tf.int32)).numpy(), atol=1e-6), name


def test_text_networks_refuse_image_data() -> None:
    with pytest.raises(DslError, match="reads token ids, but the inputter reports no vocabulary"):
        lookup("network", "text_cnn").builder({"type": "text_cnn"}, BuildContext())
    too_short = BuildContext(vocabulary_size=10, sequence_length=2)
    with pytest.raises(DslError, match=r"network\.filter_sizes: 3 is wider than the 2 tokens"):
        lookup("network", "text_cnn").builder({"type": "text_cnn", "filter_sizes": [2, 3]}, too_short)


# ------------------------------------------------------------------------------------------- modeler
def test_text_and_image_classification_share_one_modeler() -> None:
    from dsl.modelers.classification import ClassificationModeler

    text, image = lookup("modeler", "text_classification"), lookup("modeler", "image_classification")
    assert text.batch == ("tokens", "class") and image.batch == ("image", "class")
    assert text.params == image.params
    built = {name: lookup("modeler", name).builder({"type": name, "label_smoothing": 0.1, "top_k": [2]},
                                                   BuildContext(num_classes=3, class_names=["a", "b", "c"]))
             for name in ("text_classification", "image_classification")}
    for modeler in built.values():
        assert isinstance(modeler, ClassificationModeler)
        for method in ("loss", "metrics", "predictions", "record"):
            assert getattr(type(modeler), method) is getattr(ClassificationModeler, method)
    labels, logits = tf.constant([0, 2]), tf.constant([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    text_loss = built["text_classification"].loss(labels, logits, tf.keras.Sequential())
    image_loss = built["image_classification"].loss(labels, logits, tf.keras.Sequential())
    assert float(text_loss["loss"]) == float(image_loss["loss"]) > 0
    assert set(built["text_classification"].metrics("val")) == {"accuracy", "top_2_accuracy", "macro_f1"}
    record = built["text_classification"].record({"text": "hi"}, {"classes": np.array([2]),
                                                               "probabilities": np.array([[0.1, 0.2, 0.7]])}, None, {})
    assert record == {"text": "hi", "class": 2, "probabilities": [0.1, 0.2, 0.7], "name": "c"}


def test_validate_refuses_image_sections_in_a_text_pipeline(tmp_path: Path) -> None:
    for section, value in (("augmenter", "{type: cifar}"), ("network", "{type: simple_cnn}"),
                           ("modeler", "{type: image_classification}")):
        result = dslrun("validate", str(SHIPPED), "--set", f"{section}={value}", check=False)
        assert result.returncode == 1, section
        assert "text_classification_csv" in result.stdout and "tokens" in result.stdout, result.stdout


# ------------------------------------------------------------------------------------ end to end
def shipped_args(run: Path, data: Path, *extra: str) -> list[str]:
    """The shipped pipeline made test-sized, as the lead's shipped-pipeline test runs it."""
    return [str(SHIPPED), "--set", f"inputter.train={data}/train.csv", "--set", f"inputter.val={data}/eval.csv",
            "--set", f"runner.model_dir={run}", "--set", "inputter.batch_size=16", "--set", "runner.max_epochs=3", *extra]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("text") / "reviews"
    dslrun("data", "synthetic-text", "--out", str(out), "--num-train", "400", "--num-val", "100")
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    result = subprocess.run([*DSLRUN, str(SHIPPED), "--set", f"runner.model_dir={run}", "--set", "inputter.batch_size=16",
                             "--set", "runner.max_epochs=3"], capture_output=True, text=True, timeout=300,
                            env={**ENV, "DATA_DIR": str(data)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return run


@pytest.mark.slow
def test_the_shipped_pipeline_learns(trained: Path) -> None:
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if r["mode"] == "val"]
    assert len(val) == 3 and val[-1]["accuracy"] > 0.6  # 3 classes: chance is 0.33
    assert (trained / VOCABULARY_FILE).is_file()


@pytest.mark.slow
def test_eval_predict_and_export_rebuild_from_the_yaml(trained: Path, data: Path, tmp_path: Path) -> None:
    args = shipped_args(trained, data)
    logged = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()][-1]
    evaluated = json.loads(dslrun("eval", *args).stdout.strip().splitlines()[-1])
    assert evaluated["accuracy"] == pytest.approx(logged["accuracy"])

    lines = tmp_path / "lines.txt"
    lines.write_text("the referee and the striker, goal!\n\nthunder, drizzle and humidity\n", encoding="utf-8")
    result = dslrun("predict", *args, "--text", "a saucepan in the oven", str(lines))
    records = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [{k: r[k] for k in ("text", "file", "line") if k in r} for r in records] == [
        {"text": "a saucepan in the oven"}, {"text": "the referee and the striker, goal!", "file": str(lines), "line": 1},
        {"text": "thunder, drizzle and humidity", "file": str(lines), "line": 3}]
    assert [r["name"] for r in records] == ["food", "sports", "weather"]
    assert all(len(r["probabilities"]) == 3 for r in records)

    out = tmp_path / "export"
    exported = dslrun("export", *args, "--out", str(out))
    assert "serving_default(text: string [batch]" in exported.stdout
    loaded = tf.saved_model.load(str(out))
    served = loaded.signatures["serving_default"](text=tf.constant([r["text"] for r in records]))
    assert served["classes"].numpy().tolist() == [r["class"] for r in records]
    assert [name.decode() for name in served["class_names"].numpy()] == ["food", "sports", "weather"]
    assert "class_names: string [batch]" in exported.stdout
    assert np.allclose(served["probabilities"].numpy(), [r["probabilities"] for r in records], atol=1e-5)


RESUME_PIPELINE = """\
version: 1
name: text_resume
seed: 9
deterministic: true
inputter:
  type: text_classification_csv
  train: {data}/train.csv
  num_classes: 3
  sequence_length: 24
  ngrams: 2
  batch_size: 16
  shuffle_buffer: 400
network: {{type: text_cnn, filter_sizes: [2, 3], num_filters: 8, embedding_dim: 8, dropout: 0.5}}
modeler:
  type: text_classification
  optimizer: {{type: adam, learning_rate: 0.01}}
callbacks:
  - {{type: checkpoint, every_n_iters: 1, max_to_keep: 100}}
runner:
  model_dir: {run}
  workflow: [[train, 1]]
  max_epochs: 2
"""


def checkpoint_arrays(prefix: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(str(prefix))}


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_identical(tmp_path: Path, data: Path) -> None:
    paths = {}
    for name in ("reference", "killed"):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(RESUME_PIPELINE.format(data=data, run=tmp_path / name))
    dslrun(str(paths["reference"]))
    # mid epoch 2 (25 steps an epoch)
    sigkill_when([*DSLRUN, str(paths["killed"])], tmp_path / "killed" / "checkpoints" / "ckpt-30.index", ENV)
    result = dslrun(str(paths["killed"]))
    assert "at step " in result.stderr
    assert 29 <= int(result.stderr.split("at step ")[1].split()[0]) < 50, result.stderr
    assert vocabulary(tmp_path / "killed") == vocabulary(tmp_path / "reference")
    first, second = (checkpoint_arrays(tmp_path / name / "checkpoints" / "ckpt-50") for name in ("reference", "killed"))
    assert first.keys() == second.keys() and any(name.startswith("rng/") for name in first)
    assert [name for name in first if not np.array_equal(first[name], second[name])] == []


RANK_VOCABULARY = """\
import hashlib, json, sys
import horovod.tensorflow as hvd
from dsl.language.context import BuildContext, Placement
from dsl.language.registry import lookup

hvd.init()
context = BuildContext(model_dir=__import__("pathlib").Path(sys.argv[1]),
                       placement=Placement(rank=hvd.rank(), world_size=hvd.size()))
inputter = lookup("inputter", "text_classification_csv").builder(
    {{"type": "text_classification_csv", "train": "{data}/train.csv", "num_classes": 3, "ngrams": 2}}, context)
tokens = json.dumps(inputter.vectorizer.get_vocabulary())
print("rank", hvd.rank(), "vocabulary", hashlib.sha256(tokens.encode()).hexdigest(), flush=True)
"""


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_horovod_ranks_build_the_identical_vocabulary(tmp_path: Path, data: Path) -> None:
    script = tmp_path / "rank_vocabulary.py"
    script.write_text(RANK_VOCABULARY.format(data=data))
    run = tmp_path / "run"
    process = subprocess.Popen(["horovodrun", "-np", "2", "--gloo", sys.executable, str(script), str(run)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={**MULTIRANK_ENV, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    try:
        stdout, stderr = process.communicate(timeout=180)
    finally:
        kill_group(process)
    assert process.returncode == 0, stdout[-2000:] + stderr[-2000:]
    digests = {line.split("rank ")[1].split()[0]: line.split()[-1] for line in stdout.splitlines() if "vocabulary" in line}
    saved = hashlib.sha256(json.dumps(vocabulary(run)).encode()).hexdigest()
    assert sorted(digests) == ["0", "1"] and set(digests.values()) == {saved}
