"""Translation on a real corpus: dslrun's shipped Transformer against the same model written by hand in Keras.

    python bench/translation_quality.py [--minutes 5] [--write-docs]

The corpus: the example sentences of the Ding German-English dictionary (Debian's `trans-de-en`,
GPL; `apt-get install trans-de-en`, which `make bench-quality` does when root): each entry's
sub-entries are aligned on both sides, and those that are whole sentences of 3-12 words (no
dictionary markup) are short human translations, about 11,800 English -> German pairs. 1,000 are
held out for the test, the same for both systems.

- **dslrun**: `pipelines/translation.yaml` as shipped, pointed at the corpus with `--set` (a larger
  SentencePiece vocabulary and `max_length` for real sentences, the model widened to the
  reference's size), trained for `--minutes` of wall time (its epochs chosen from a first timed
  epoch), then `dslrun eval --mode test` writes its beam-search translations.
- **Keras by hand**: keras.io's "English-to-Spanish translation with a sequence-to-sequence
  Transformer" (word-level TextVectorization, a positional embedding, post-norm encoder and
  decoder layers, RMSprop, greedy decoding one token at a time), at the same width and depth,
  trained for the same wall time as dslrun took.
- **copy**: the English source as its own "translation", the floor any model must clear.

BLEU and chrF by sacrebleu against the raw references, and BLEU on lowercased text without
punctuation (`bleu_plain`), since the keras.io model lowercases and strips punctuation by design:
that column compares the two models on what both produce.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from docs_block import publish  # noqa: E402

DICTIONARY = Path("/usr/share/trans/de-en")
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
# The model both systems train: the shipped pipeline's, wider (real sentences are harder than the synthetic pair).
WIDTH = {"layers": 2, "d_model": 128, "heads": 4, "ff": 512}
TEST_PAIRS = 1000


def corpus(dictionary: Path = DICTIONARY) -> list[tuple[str, str]]:
    """(English, German) example sentences of the Ding dictionary, sorted, deduplicated."""
    if not dictionary.is_file():
        raise SystemExit(f"{dictionary} is missing: apt-get install trans-de-en (Debian's Ding dictionary)")
    pairs = set()
    for line in dictionary.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or " :: " not in line:
            continue
        german, english = line.split(" :: ", 1)
        sides = german.split(" | "), english.split(" | ")
        if len(sides[0]) != len(sides[1]):
            continue
        for de, en in zip(*sides):
            de, en = de.strip(), en.strip()
            if not (re.search(r"[.!?]$", de) and re.search(r"[.!?]$", en)):
                continue
            if re.search(r"[{}\[\]<>/;…]|\b(sth|sb|etw|jdm|jdn|jds)\.", de + " " + en):
                continue  # dictionary markup, not a sentence
            if 3 <= len(en.split()) <= 10 and 3 <= len(de.split()) <= 12:
                pairs.add((en, de))
    return sorted(pairs)


def split(pairs: list[tuple[str, str]], out: Path) -> tuple[Path, Path]:
    """train.tsv and test.tsv in `out` (the test: 1,000 pairs drawn with a fixed seed)."""
    shuffled = list(pairs)
    random.Random(0).shuffle(shuffled)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("test.tsv", shuffled[:TEST_PAIRS]), ("train.tsv", shuffled[TEST_PAIRS:])):
        (out / name).write_text("".join(f"{en}\t{de}\n" for en, de in rows), encoding="utf-8")
    return out / "train.tsv", out / "test.tsv"


def plain(text: str) -> str:
    """Lowercased, punctuation dropped, spaces single: what the keras.io model writes."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def scores(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    import sacrebleu

    return {"bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
            "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
            "bleu_plain": sacrebleu.corpus_bleu([plain(h) for h in hypotheses], [[plain(r) for r in references]]).score}


# ------------------------------------------------------------------------------ dslrun
def dslrun_settings(train: Path, test: Path, run: Path, epochs: int) -> list[str]:
    settings = [f"inputter.train={train}", f"inputter.val={test}", f"inputter.test={test}", "inputter.vocab_size=8000",
                "inputter.max_length=40", "inputter.skip_long=true", f"runner.model_dir={run}",
                f"runner.max_epochs={epochs}", "runner.workflow=[[train, 1]]", "callbacks=[{type: train_basic}]",
                "modeler.optimizer.learning_rate=0.001", *(f"network.{key}={value}" for key, value in WIDTH.items())]
    return [arg for setting in settings for arg in ("--set", setting)]


def run_dslrun(train: Path, test: Path, scratch: Path, minutes: float) -> tuple[list[str], float, int]:
    """dslrun's test translations, its training wall time and epochs: one timed epoch decides how many fit."""
    dslrun = [sys.executable, "-m", "dsl"]
    pipeline = str(ROOT / "pipelines" / "translation.yaml")
    started = time.perf_counter()
    subprocess.run([*dslrun, pipeline, *dslrun_settings(train, test, scratch / "probe", 1)], check=True, env=ENV,
                   capture_output=True)
    per_epoch = time.perf_counter() - started
    epochs = max(1, int(minutes * 60 / per_epoch))
    started = time.perf_counter()
    subprocess.run([*dslrun, pipeline, *dslrun_settings(train, test, scratch / "run", epochs)], check=True, env=ENV,
                   capture_output=True)
    seconds = time.perf_counter() - started
    subprocess.run([*dslrun, "eval", pipeline, "--mode", "test", *dslrun_settings(train, test, scratch / "run", epochs)],
                   check=True, env=ENV, capture_output=True)
    return (scratch / "run" / "hypotheses_test.txt").read_text(encoding="utf-8").splitlines(), seconds, epochs


# ------------------------------------------------------------------------------ Keras by hand (keras.io)
def run_keras(train: list[tuple[str, str]], test: list[tuple[str, str]], seconds: float) -> tuple[list[str], int]:
    """keras.io's English-to-Spanish Transformer, at WIDTH, trained for `seconds`; its greedy test translations."""
    import tensorflow as tf

    import dsl  # noqa: F401  (TF_USE_LEGACY_KERAS: the same Keras as dslrun's)

    tf.keras.utils.set_random_seed(0)
    vocab, length, width, heads, ff = 15000, 20, WIDTH["d_model"], WIDTH["heads"], WIDTH["ff"]
    punctuation = re.escape("!\"#$%&'()*+,-./:;<=>?@\\^_`{|}~¿’“”–")

    def standardize(text: Any) -> Any:
        return tf.strings.regex_replace(tf.strings.lower(text), f"[{punctuation}]", "")

    source_vectors = tf.keras.layers.TextVectorization(vocab, output_sequence_length=length, standardize=standardize)
    target_vectors = tf.keras.layers.TextVectorization(vocab, output_sequence_length=length + 1, standardize=standardize)
    source_vectors.adapt([en for en, _ in train])
    target_vectors.adapt([f"starttoken {de} endtoken" for _, de in train])

    def batches(pairs: list[tuple[str, str]]) -> Any:
        english = source_vectors([en for en, _ in pairs])
        german = target_vectors([f"starttoken {de} endtoken" for _, de in pairs])
        data = tf.data.Dataset.from_tensor_slices(({"encoder_inputs": english, "decoder_inputs": german[:, :-1]},
                                                   german[:, 1:]))
        return data.shuffle(2048, seed=0).batch(64).prefetch(tf.data.AUTOTUNE)

    class PositionalEmbedding(tf.keras.layers.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.tokens = tf.keras.layers.Embedding(vocab, width)
            self.positions = tf.keras.layers.Embedding(length, width)

        def call(self, inputs: Any) -> Any:
            return self.tokens(inputs) + self.positions(tf.range(tf.shape(inputs)[-1]))

        def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
            return tf.not_equal(inputs, 0)

    def encoder_layer(x: Any, mask: Any) -> Any:
        attended = tf.keras.layers.MultiHeadAttention(heads, width)(x, x, attention_mask=mask[:, None, :])
        x = tf.keras.layers.LayerNormalization()(x + attended)
        projected = tf.keras.layers.Dense(width)(tf.keras.layers.Dense(ff, activation="relu")(x))
        return tf.keras.layers.LayerNormalization()(x + projected)

    def decoder_layer(y: Any, memory: Any, source_mask: Any) -> Any:
        attended = tf.keras.layers.MultiHeadAttention(heads, width)(y, y, use_causal_mask=True)
        y = tf.keras.layers.LayerNormalization()(y + attended)
        crossed = tf.keras.layers.MultiHeadAttention(heads, width)(y, memory, attention_mask=source_mask[:, None, :])
        y = tf.keras.layers.LayerNormalization()(y + crossed)
        projected = tf.keras.layers.Dense(width)(tf.keras.layers.Dense(ff, activation="relu")(y))
        return tf.keras.layers.LayerNormalization()(y + projected)

    source = tf.keras.Input((None,), dtype="int64", name="encoder_inputs")
    target = tf.keras.Input((None,), dtype="int64", name="decoder_inputs")
    source_mask = tf.keras.layers.Lambda(lambda t: tf.not_equal(t, 0))(source)
    memory = PositionalEmbedding()(source)
    y = PositionalEmbedding()(target)
    for _ in range(WIDTH["layers"]):
        memory = encoder_layer(memory, source_mask)
    for _ in range(WIDTH["layers"]):
        y = decoder_layer(y, memory, source_mask)
    logits = tf.keras.layers.Dense(vocab)(tf.keras.layers.Dropout(0.5)(y))
    model = tf.keras.Model([source, target], logits)
    model.compile("rmsprop", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
                  metrics=["accuracy"])

    class Budget(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.start, self.epochs = time.perf_counter(), 0

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.epochs = epoch + 1
            if time.perf_counter() - self.start >= seconds:
                self.model.stop_training = True

    budget = Budget()
    model.fit(batches(train), epochs=10_000, verbose=0, callbacks=[budget])
    words = target_vectors.get_vocabulary()
    end = words.index("endtoken")
    encoded = source_vectors([en for en, _ in test])
    decoded = tf.fill([len(test), 1], tf.cast(words.index("starttoken"), tf.int64))
    step = tf.function(lambda s, d: tf.argmax(model([s, d], training=False)[:, -1, :], axis=-1), reduce_retracing=True)
    for _ in range(length):  # keras.io's greedy loop: the whole decoder again for each next token
        decoded = tf.concat([decoded, step(encoded, decoded)[:, None]], axis=1)
    found = []
    for row in decoded.numpy()[:, 1:]:
        tokens = []
        for token in row:
            if token == end:
                break
            tokens.append(words[token])
        found.append(" ".join(token for token in tokens if token not in ("", "[UNK]")))
    return found, budget.epochs


# ------------------------------------------------------------------------------ the table
def markdown(report: dict[str, Any]) -> str:
    rows = ["| system | BLEU | chrF | BLEU, lowercased without punctuation | training | epochs |", "|---|---|---|---|---|---|"]
    for name in ("dslrun", "keras", "copy"):
        s = report[name]
        rows.append(f"| {s['label']} | {s['bleu']:.1f} | {s['chrf']:.1f} | {s['bleu_plain']:.1f} | "
                    f"{s.get('seconds', 0):.0f} s | {s.get('epochs', '')} |")
    return (f"{report['train_pairs']} train / {report['test_pairs']} test English -> German pairs of the Ding "
            f"dictionary (`trans-de-en`), {report['machine']}, {report['date']}; "
            "rerun: `python bench/translation_quality.py --write-docs`.\n\n" + "\n".join(rows) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="dslrun's training wall time (about)")
    parser.add_argument("--write-docs", action="store_true", help="put the table in docs/benchmarks.md")
    args = parser.parse_args()
    pairs = corpus()
    with tempfile.TemporaryDirectory(prefix="dslrun-translation-") as scratch:
        train_file, test_file = split(pairs, Path(scratch) / "corpus")
        test = [tuple(line.split("\t")) for line in test_file.read_text(encoding="utf-8").splitlines()]
        train = [tuple(line.split("\t")) for line in train_file.read_text(encoding="utf-8").splitlines()]
        references = [de for _, de in test]
        print(f"corpus: {len(train)} train / {len(test)} test pairs", file=sys.stderr, flush=True)
        hypotheses, seconds, epochs = run_dslrun(train_file, test_file, Path(scratch), args.minutes)
        print(f"dslrun: {epochs} epochs in {seconds:.0f} s", file=sys.stderr, flush=True)
        keras_hypotheses, keras_epochs = run_keras(train, test, seconds)  # type: ignore[arg-type]
    report = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} cores", "train_pairs": len(train),
        "test_pairs": len(test),
        "dslrun": {"label": "dslrun `translation.yaml` (beam 4)", **scores(hypotheses, references), "seconds": seconds,
                   "epochs": epochs},
        "keras": {"label": "Keras by hand (keras.io, greedy)", **scores(keras_hypotheses, references),
                  "seconds": seconds, "epochs": keras_epochs},
        "copy": {"label": "the source copied", **scores([en for en, _ in test], references)},
    }
    publish("translation-quality", report, markdown(report), "Translation on a real corpus", args.write_docs)


if __name__ == "__main__":
    main()
