"""`dslrun validate --data` on text: lengths in tokens, the share cut at sequence_length, the
vocabulary train gives and how much of val it misses — through the CLI, on generated texts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_support import dslrun

PIPELINE = """\
version: 1
inputter:
  type: text_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 3
  sequence_length: {length}
  max_tokens: {max_tokens}
  batch_size: 8
network: {{type: embedding_bag}}
modeler: {{type: text_classification}}
runner: {{max_epochs: 1}}
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("texts") / "reviews"
    dslrun("data", "synthetic-text", "--out", str(out), "--num-train", "200", "--num-val", "50")
    return out


def validate(tmp_path: Path, data: Path, length: int, max_tokens: int) -> dict:
    path = tmp_path / "text.yaml"
    path.write_text(PIPELINE.format(data=data, length=length, max_tokens=max_tokens), encoding="utf-8")
    return json.loads(dslrun("validate", "--data", "--format", "json", str(path)).stdout)["files"][0]


def test_text_splits_report_lengths_vocabulary_and_oov(tmp_path: Path, data: Path) -> None:
    report = validate(tmp_path, data, 48, 10000)
    train, val = (split["text"] for split in report["data"])
    assert 1 <= train["tokens"]["median"] <= train["tokens"]["p95"] <= train["tokens"]["max"] <= 48
    assert train["truncated"] == 0.0 and train["vocabulary"] == train["distinct_words"] > 10
    assert 0.0 <= val["oov"] < 0.2 and "vocabulary" not in val
    assert not [d for d in report["diagnostics"] if d["severity"] == "warning"]


def test_a_small_vocabulary_and_short_sequences_show(tmp_path: Path, data: Path) -> None:
    report = validate(tmp_path, data, 4, 12)
    train, val = (split["text"] for split in report["data"])
    assert train["truncated"] > 0.5 and train["vocabulary"] == 10 < train["distinct_words"]
    assert val["oov"] > 0.1  # words past train's 10 most frequent are out of vocabulary
    warning = next(d for d in report["diagnostics"] if d["path"] == "inputter.sequence_length")
    assert warning["severity"] == "warning" and "longer than sequence_length 4 tokens" in warning["message"]
