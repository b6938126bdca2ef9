"""Machine translation from YAML alone: the synthetic pair, `parallel_text` and its SentencePiece
models, the rules `dslrun validate` applies, and the shipped pipeline through the CLI (train, eval,
predict, export and the exported model translating raw text in a fresh process).

Unit tests build the inputter in this process on tiny files; the end-to-end tests run `dslrun`
as a user does on data from `dslrun data synthetic-translation`, training once per module.
"""

from __future__ import annotations

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
from dsl.tasks.machine_translation._sentencepiece import SETTINGS_FILE
from dsl.tasks.machine_translation._synthetic_data import TranslationSpec, generate, write

from e2e_support import DSLRUN, ENV, assert_identical, dslrun, sigkill_when

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "pipelines" / "translation.yaml"
# The shipped pipeline at test size: one small layer, a few epochs (BLEU well above 0 on the synthetic pair).
SMALL = ["--set", "network.layers=1", "--set", "runner.max_epochs=6", "--set", "inputter.batch_size=32"]


def build(run: Path, rank: int = 0, fresh_start: bool = False, **params):
    """A parallel_text inputter built through the registry, after checking its section against the schema."""
    section = {"type": "parallel_text", "vocab_size": 64, "max_length": 40, **params}
    jsonschema.Draft202012Validator(lookup("inputter", "parallel_text").schema()).validate(section)
    context = BuildContext(model_dir=run, placement=Placement(rank=rank, world_size=1), fresh_start=fresh_start)
    return lookup("inputter", "parallel_text").builder(section, context)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("translation") / "pairs"
    dslrun("data", "synthetic-translation", "--out", str(out), "--num-train", "1200", "--num-val", "60")
    return out


# ------------------------------------------------------------------------------ the synthetic pair
def test_the_synthetic_pair_reorders_and_agrees() -> None:
    pairs = generate(400, TranslationSpec(), 0)
    assert len(set(pairs)) > 300  # varied, not a handful of sentences repeated
    for source, target in pairs:
        words = source.split()
        plural_subject = words[1 if words[0] in ("today", "often", "later") else 0] in ("two", "three", "four", "five")
        assert target.split()[-1].endswith("nt" if plural_subject else "t"), (source, target)  # the verb agrees, last
        assert len(target.split()) == len(words)  # a word for a word, reordered


def test_data_writes_both_layouts_aligned_and_is_idempotent(tmp_path: Path) -> None:
    out = tmp_path / "pairs"
    assert write(out, TranslationSpec(num_train=20, num_val=5))[0]
    tsv = [line.split("\t") for line in (out / "train.tsv").read_text().splitlines()]
    assert [s for s, _ in tsv] == (out / "train.en").read_text().splitlines()
    assert [t for _, t in tsv] == (out / "train.xx").read_text().splitlines()
    assert len((out / "eval.tsv").read_text().splitlines()) == 5
    assert not write(out, TranslationSpec(num_train=20, num_val=5))[0]  # complete: nothing written again
    assert write(out, TranslationSpec(num_train=21, num_val=5))[0]  # another set: written


# ------------------------------------------------------------------------------ parallel_text
def test_inputter_reads_both_layouts_the_same_and_keeps_its_models(tmp_path: Path) -> None:
    write(tmp_path / "pairs", TranslationSpec(num_train=200, num_val=10))
    pairs = tmp_path / "pairs"
    tsv = build(tmp_path / "a", train=str(pairs / "train.tsv"))
    aligned = build(tmp_path / "b", train={"source": str(pairs / "train.en"), "target": str(pairs / "train.xx")})
    for first, second in zip(tsv.arrays["train"][0].values(), aligned.arrays["train"][0].values()):
        np.testing.assert_array_equal(first, second)
    features, targets = tsv.arrays["train"]
    eos, bos = tsv.tokenizers.eos_id, tsv.tokenizers.bos_id
    assert (features["target"][:, 0] == bos).all()
    # The decoder input is <s> + the target; the targets are the target + </s>: shifted by one.
    lengths = (targets > 0).sum(axis=1)
    assert (targets[np.arange(len(targets)), lengths - 1] == eos).all()
    words = (targets[:, :-1] > 0) & (targets[:, :-1] != eos)
    np.testing.assert_array_equal(features["target"][:, 1:][words], targets[:, :-1][words])
    assert (features["target"][:, 1:][~words] == 0).all()
    saved = json.loads((tmp_path / "a" / SETTINGS_FILE).read_text())
    assert saved["files"] == {"source": "sentencepiece.model", "target": "sentencepiece.model"}
    # A rebuild reads the run directory's model back; other settings are an error naming them.
    assert build(tmp_path / "a", train=str(pairs / "train.tsv")).tokenizers.source_proto == tsv.tokenizers.source_proto
    with pytest.raises(DslError, match=r"inputter.vocab_size 64 \(now 80\).*--no-resume"):
        build(tmp_path / "a", train=str(pairs / "train.tsv"), vocab_size=80)
    assert build(tmp_path / "a", fresh_start=True, train=str(pairs / "train.tsv"), vocab_size=80)


def test_separate_vocabularies_and_a_named_model(tmp_path: Path) -> None:
    write(tmp_path / "pairs", TranslationSpec(num_train=200, num_val=10))
    train = str(tmp_path / "pairs" / "train.tsv")
    separate = build(tmp_path / "a", train=train, shared_vocabulary=False)
    assert separate.tokenizers.source_proto != separate.tokenizers.target_proto
    assert sorted(p.name for p in (tmp_path / "a").glob("*.model")) == ["sentencepiece_source.model",
                                                                         "sentencepiece_target.model"]
    named = build(tmp_path / "b", train=train, source_model=str(tmp_path / "a" / "sentencepiece_source.model"),
                  target_model=str(tmp_path / "a" / "sentencepiece_target.model"))
    assert named.tokenizers.target_proto == separate.tokenizers.target_proto
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(DslError, match=r"inputter.source_model: .*junk.model is not a SentencePiece model"):
        build(tmp_path / "c", train=train, source_model=str(tmp_path / "junk.model"))


@pytest.mark.parametrize(("files", "message"), [
    ({"train.en": "a b\nc d\n", "train.xx": "x\n"}, r"train.xx line 2: .*train.en has 2 lines and .*train.xx 1"),
    ({"train.en": "a b\n\nc\n", "train.xx": "x\ny\nz\n"}, r"train.en line 2: the source sentence is empty"),
    ({"train.tsv": "a b\tx y\nno tab here\n"}, r"train.tsv line 2: expected `source<TAB>target` \(one tab\), found 0"),
    ({"train.tsv": "a\tb\nc\t\n"}, r"train.tsv line 2: the target sentence is empty"),
])
def test_bad_lines_are_errors_naming_file_and_line(tmp_path: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    train = str(tmp_path / "train.tsv") if "train.tsv" in files else {"source": str(tmp_path / "train.en"),
                                                                         "target": str(tmp_path / "train.xx")}
    with pytest.raises(DslError, match=message):
        build(tmp_path / "run", train=train)


def test_a_long_pair_is_an_error_or_skipped_and_counted(tmp_path: Path) -> None:
    pairs = generate(120, TranslationSpec(), 0)
    long = " ".join(["the red cat sees a dog"] * 6)
    lines = [f"{s}\t{t}" for s, t in pairs[:50]] + [f"{long}\tla miko"] + [f"{s}\t{t}" for s, t in pairs[50:]]
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DslError, match=r"train.tsv line 51: the source sentence has \d+ subword tokens, over "
                                       r"inputter.max_length 40; .*skip_long: true"):
        build(tmp_path / "a", train=str(tmp_path / "train.tsv"))
    skipping = build(tmp_path / "b", train=str(tmp_path / "train.tsv"), skip_long=True)
    assert skipping.skipped_examples("train") == 1 and skipping.num_examples("train") == 120


# ------------------------------------------------------------------------------ dslrun validate
def validate(tmp_path: Path, *settings: str) -> subprocess.CompletedProcess:
    args = [arg for setting in settings for arg in ("--set", setting)]
    return dslrun("validate", str(SHIPPED), *args, check=False)


@pytest.mark.parametrize(("setting", "message"), [
    ("network.heads=3", r"error: network.heads: 3 heads do not divide d_model 64; .* among 1, 2, 4, 8"),
    ("modeler.max_decode_length=10", r"modeler.max_decode_length: 10 is below inputter.max_length 24"),
    ("modeler.lr_schedule={type: constant}", r"modeler.lr_schedule: a Transformer trained without a warmup"),
    ("inputter.shared_vocabulary=false", r"network.shared_embeddings: one embedding table for both sides needs one "
                                         r"vocabulary, but inputter.shared_vocabulary is false"),
    ("modeler={type: text_classification}", r"modeler"),
    ("modeler.monitor_this=1", r"monitor_this"),
])
def test_validate_catches_what_the_pipeline_alone_says(tmp_path: Path, setting: str, message: str) -> None:
    result = validate(tmp_path, setting)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert __import__("re").search(message, result.stdout + result.stderr), result.stdout + result.stderr


def test_validate_catches_a_monitor_the_modeler_does_not_report(tmp_path: Path) -> None:
    result = validate(tmp_path, "callbacks[4].save_best.monitor=val/accuracy")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "save_best.monitor: the val phase has no output 'accuracy'" in result.stdout
    assert "val/bleu, val/chrf" in result.stdout  # the message lists what the phase does report


def test_validate_build_traces_a_step(tmp_path: Path) -> None:
    result = dslrun("validate", "--build", str(SHIPPED), "--set", "network.layers=1", check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------------------ the shipped pipeline
@pytest.fixture(scope="module")
def trained(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("translation-run") / "run"
    dslrun(str(SHIPPED), *SMALL, "--set", f"runner.model_dir={run}", env={**ENV, "DATA_DIR": str(data)})
    return run


def settings(data: Path, run: Path) -> tuple[list[str], dict[str, str]]:
    return [*SMALL, "--set", f"runner.model_dir={run}"], {**ENV, "DATA_DIR": str(data)}


@pytest.mark.slow
def test_the_shipped_pipeline_learns_to_translate(trained: Path) -> None:
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if r["mode"] == "val"]
    assert len(val) == 6 and {"bleu", "chrf", "token_accuracy", "perplexity"} <= val[-1].keys()
    assert val[-1]["bleu"] > 30 and val[-1]["bleu"] > val[0]["bleu"], [r["bleu"] for r in val]
    assert (trained / "sentencepiece.model").is_file() and list((trained / "best").glob("ckpt-*.index"))


@pytest.mark.slow
def test_eval_reports_bleu_and_predict_translates(trained: Path, data: Path, tmp_path: Path) -> None:
    args, env = settings(data, trained)
    result = dslrun("eval", str(SHIPPED), *args, env=env)
    record = json.loads(result.stdout.strip().splitlines()[-1])
    last = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines() if '"val"' in line][-1]
    assert record["bleu"] == pytest.approx(last["bleu"], abs=1e-4)
    # The hypotheses file holds the val sentences' translations in the data's order: scored against
    # the val references as they are written, they give the BLEU eval reported.
    import sacrebleu

    hypotheses = Path(record["hypotheses"]).read_text().splitlines()
    references = (data / "eval.xx").read_text().splitlines()
    assert Path(record["hypotheses"]) == trained / "hypotheses_val.txt" and len(hypotheses) == len(references) == 60
    assert sacrebleu.corpus_bleu(hypotheses, [references]).score == pytest.approx(record["bleu"], abs=1e-3)
    sentences = tmp_path / "sentences.en"
    sentences.write_text("the old cat sees two small dogs\n\nthree happy farmers feed a fish\n")
    result = dslrun("predict", str(SHIPPED), str(sentences), "--text", "a bird finds the horse", *args, env=env)
    lines = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [line.get("line") for line in lines] == [None, 1, 3]
    assert lines[0]["text"] == "a bird finds the horse" and all(line["translation"].strip() for line in lines)
    assert lines[1]["translation"].split()[-1].endswith("t")  # the verb, last, as the pair puts it
    greedy = dslrun("predict", str(SHIPPED), "--text", "a bird finds the horse", "--beam-size", "1", *args, env=env)
    assert json.loads(greedy.stdout)["translation"].strip()
    refused = dslrun("predict", str(SHIPPED), "--text", "a bird", "--beam-size", "0", *args, env=env, check=False)
    assert refused.returncode == 2 and "--beam-size" in refused.stderr


EXPORTED = """\
import sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece op the exported graph uses
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = serve(text=tf.constant(sys.argv[2:]))
print("\\n".join(t.decode() for t in out["translation"].numpy()))
"""


@pytest.mark.slow
def test_the_exported_model_translates_raw_text_alone(trained: Path, data: Path, tmp_path: Path) -> None:
    args, env = settings(data, trained)
    sentences = ["the old cat sees two small dogs", "a bird finds the horse"]
    predicted = [json.loads(line)["translation"] for line in dslrun(
        "predict", str(SHIPPED), *[arg for s in sentences for arg in ("--text", s)], *args, env=env).stdout.splitlines()]
    dslrun("export", str(SHIPPED), "--out", str(tmp_path / "exported"), *args, env=env)
    result = subprocess.run([sys.executable, "-c", EXPORTED, str(tmp_path / "exported"), *sentences],
                            capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == predicted
    # Checkpoint averaging: the mean of the last checkpoints' weights, exported and translating.
    averaged = dslrun("export", str(SHIPPED), "--out", str(tmp_path / "averaged"), "--average-last", "2", *args, env=env)
    assert "exported the mean of 2 checkpoints (ckpt-" in averaged.stdout, averaged.stdout
    result = subprocess.run([sys.executable, "-c", EXPORTED, str(tmp_path / "averaged"), *sentences],
                            capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert result.returncode == 0 and all(line.strip() for line in result.stdout.splitlines()), result.stderr[-3000:]


RESUME = """\
version: 1
name: translation_resume
seed: 4
deterministic: true
inputter: {{type: parallel_text, train: {data}/train.tsv, vocab_size: 128, max_length: 32, batch_tokens: 640,
            shuffle_buffer: 2000}}
augmenter: {{type: none}}
network: {{type: transformer, layers: 1, d_model: 32, heads: 2, ff: 64, dropout: 0.1, shared_embeddings: true}}
modeler:
  type: machine_translation
  optimizer: {{type: adam, learning_rate: 0.002}}
  lr_schedule: {{type: inverse_sqrt, warmup_epochs: 0.5}}
callbacks:
  - {{type: checkpoint, every_n_iters: 1, max_to_keep: 100}}
runner:
  model_dir: {run}
  workflow: [[train, 1]]
  max_epochs: 2
"""


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_identical(tmp_path: Path, data: Path) -> None:
    """Token-sized batches (batch_tokens), killed mid epoch 2: the resumed run replays the same batches."""
    paths = {}
    for name in ("reference", "killed"):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(RESUME.format(data=data, run=tmp_path / name))
    result = dslrun(str(paths["reference"]))
    assert "dslrun: inputter.batch_tokens 640: about 640 tokens per global batch" in result.stderr
    last = max(int(p.name[5:-6]) for p in (tmp_path / "reference" / "checkpoints").glob("ckpt-*.index"))
    per_epoch = last // 2
    sigkill_when([*DSLRUN, str(paths["killed"])], tmp_path / "killed" / "checkpoints" / f"ckpt-{per_epoch + 5}.index", ENV)
    result = dslrun(str(paths["killed"]))
    assert "at step " in result.stderr
    # Mid epoch 2: the kill lands once ckpt-<per_epoch + 5>.index appears, which may be before the
    # manager's `checkpoint` file names it (then the run resumes from the one before).
    assert per_epoch < int(result.stderr.split("at step ")[1].split()[0]) < last, result.stderr
    assert (tmp_path / "killed" / "sentencepiece.model").read_bytes() == \
        (tmp_path / "reference" / "sentencepiece.model").read_bytes()
    assert_identical(tmp_path / "reference" / "checkpoints" / f"ckpt-{last}",
                     tmp_path / "killed" / "checkpoints" / f"ckpt-{last}")


# ------------------------------------------------------------------------------ batches sized in tokens
def test_token_batches_are_equal_in_count_on_every_rank_disjoint_and_within_budget() -> None:
    from dsl.tasks.machine_translation import _token_batches as token_batches

    rng = np.random.default_rng(0)
    count, padded = 301, 33
    lengths = rng.integers(2, padded + 1, count)
    ids = np.arange(count, dtype=np.int32)[:, None] * np.ones((1, padded), np.int32)
    arrays = ({"source": ids, "target": ids}, ids)
    buckets = token_batches.buckets(lengths, padded)
    assert [b.bound for b in buckets] == [8, 16, 24, 32, 33] and sum(len(b.rows) for b in buckets) == count
    seen: list[int] = []
    for rank in range(3):
        epoch = list(token_batches.dataset(arrays, buckets, 200, 3, rank, tf.constant(7, tf.int64), False))
        assert len(epoch) == token_batches.steps(buckets, 200, 3, False)
        for _, targets in epoch:
            rows, bound = targets.shape
            assert rows * bound <= 200 or rows == 1, (rows, bound)
            assert all(lengths[row] <= bound for row in targets.numpy()[:, 0])  # each pair in its bucket's bound
            seen += targets.numpy()[:, 0].tolist()
        again = list(token_batches.dataset(arrays, buckets, 200, 3, rank, tf.constant(7, tf.int64), False))
        assert [t.numpy().tolist() for _, t in again] == [t.numpy().tolist() for _, t in epoch]  # a seed, an epoch
    assert len(seen) == len(set(seen)) and len(seen) >= count - 3 * len(buckets)  # disjoint; a few wait a turn


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_horovod_ranks_take_token_sized_batches(tmp_path: Path, data: Path) -> None:
    from e2e_support import MULTIRANK_ENV, run_in_group

    result = run_in_group(["horovodrun", "-np", "2", "--gloo", *DSLRUN, str(SHIPPED), *SMALL,
                           "--set", "inputter.batch_tokens=1024", "--set", "runner.max_epochs=1",
                           "--set", f"runner.model_dir={tmp_path / 'run'}"],
                          env={**MULTIRANK_ENV, "DATA_DIR": str(data)}, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "about 1024 tokens per global batch = 2 x 512 tokens" in out and "identical on all 2 ranks" in out
