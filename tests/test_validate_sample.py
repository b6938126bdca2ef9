"""`dslrun validate --data --sample N` and the inspection of large splits on every core.

At ImageNet's size every row is still listed (labels checked exactly) but only N images are
inspected, drawn at random, and the summary states the odds; a split past `SERIAL_FIRST`
images is inspected by a pool of processes with the same result as one process.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_validate_data import TFRECORD, example, generated, invoke, line_of, pipeline, rows, write_records

from dsl.data_check import inspection
from dsl.data_check.examples import Example
from dsl.data_check.sample import Reservoir, promise, smallest_share_found
from dsl.language.diagnostics import Location

__all__ = ["generated"]  # the module fixture, shared with test_validate_data


@pytest.fixture
def data(generated: Path, tmp_path: Path) -> Path:
    """The generated set, its train CSV listing its 60 images five times over (300 rows)."""
    import shutil

    out = Path(shutil.copytree(generated, tmp_path / "data"))
    header, *listed = rows(out / "train.csv")
    (out / "train.csv").write_text("\n".join(",".join(row) for row in [header, *listed * 5]) + "\n")
    return out


def test_the_promise_is_the_hypergeometric_bound() -> None:
    # 3000 draws of a million: about 0.1 % bad images are found with 95 % probability (1 - 0.05 ** (1/3000)).
    assert 0.00098 < smallest_share_found(3000, 1_000_000) < 0.00101
    # 99 draws of 100: a single bad image is found with probability 0.99.
    assert smallest_share_found(99, 100) == 0.01
    assert smallest_share_found(100, 100) == 0.0
    # Half of 20: 5 bad of 20 are missed with probability C(15,10)/C(20,10) = 0.016, 4 bad with 0.043, 3 with 0.105.
    assert smallest_share_found(10, 20) == 4 / 20
    assert promise(5000, 1_281_167) == (
        "5000 of 1281167 images inspected, drawn at random: a fault in 0.060 % of the images (~766) or more is "
        "found with 95% probability")


def _examples(count: int) -> list[Example]:
    return [Example(k % 3, f"row {k}", Location("x.csv", k), path=f"{k}.png") for k in range(count)]


def test_the_reservoir_is_uniform_and_repeatable() -> None:
    items = _examples(100)
    kept: list[int] = []
    for seed in range(400):
        reservoir = Reservoir(10, seed)
        for item in items:
            reservoir.offer(item)
        assert reservoir.seen == 100 and len({e.origin for e in reservoir.items}) == 10
        kept += [int(e.origin.split()[1]) for e in reservoir.items]
    counts = [kept.count(k) for k in range(100)]  # 40 expected each (sd ~6)
    assert min(counts) > 15 and max(counts) < 70, counts
    assert sum(counts[:50]) == pytest.approx(sum(counts[50:]), rel=0.15)  # no lean to either end
    first, again = Reservoir(10), Reservoir(10)
    for item in items:
        first.offer(item)
        again.offer(item)
    assert first.items == again.items


def test_a_sample_covering_the_split_finds_what_the_full_check_finds(tmp_path: Path, data: Path) -> None:
    line, image = line_of(data / "train.csv", 7)
    image.unlink()  # listed 5 times: lines 9, 69, 129, 189, 249
    path = pipeline(tmp_path, data)
    full = invoke("validate", "--data", str(path))
    sampled = invoke("validate", "--data", "--sample", "1000", str(path))
    assert full.exit_code == sampled.exit_code == 1
    errors = sorted(line for line in full.stdout.splitlines() if ": error: " in line)
    assert len(errors) == 5 and errors == sorted(line for line in sampled.stdout.splitlines() if ": error: " in line)
    assert any(e.startswith(f"{data / 'train.csv'}:{line}:1: error: inputter.train: image {image}: No such file")
               for e in errors)
    assert ("inputter.train: 295 examples from " f"{data}/train.csv, 5 more unusable (300 of 300 images inspected, "
            "drawn at random: a fault in 0 % of the images (~0) or more is found with 95% probability)") in sampled.stdout


def test_a_sample_finds_missing_images_with_the_stated_odds_and_every_bad_label(tmp_path: Path, data: Path) -> None:
    listed = rows(data / "train.csv")
    for image, _ in random.Random(3).sample(listed[1:61], 30):
        (data / image).unlink(missing_ok=True)  # half the images: 150 of 300 rows
    with (data / "train.csv").open("a") as handle:
        handle.write(f"{listed[1][0]},9\n")  # a bad label on the last row, never drawn for inspection
    result = invoke("validate", "--data", "--sample", "20", "--format", "json", str(pipeline(tmp_path, data)))
    assert result.exit_code == 1
    report = json.loads(result.stdout)["files"][0]
    errors = [d for d in report["diagnostics"] if d["severity"] == "error"]
    missing = [d for d in errors if "No such file" in d["message"]]
    assert any("label 9 is outside 0..2" in d["message"] and d["line"] == 302 for d in errors)
    # 20 draws of 300 rows, 150 of them missing: none found has probability < 1e-6; at most 20 are.
    assert 3 <= len(missing) <= 20
    train = report["data"][0]
    assert train["inspected"] == 20 and train["examples"] + train["unusable"] == 300
    assert train["unusable"] == len(missing)


def test_a_sampled_tfrecord_split_inspects_its_records_images(tmp_path: Path, data: Path) -> None:
    listed = [(data / image, int(label)) for image, label in rows(data / "train.csv")[1:61]]
    records = [example(image.read_bytes(), label) for image, label in listed]
    records[2] = example(listed[2][0].read_bytes()[:60], 0)
    write_records(data / "train.tfrecord", records)
    write_records(data / "val-0.tfrecord", records[10:20])
    path = pipeline(tmp_path, data, TFRECORD)
    covered = invoke("validate", "--data", "--sample", "60", str(path))
    assert f"{data}/train.tfrecord:1:1: error: inputter.train: train.tfrecord record 3: the image is truncated" in (
        covered.stdout)
    small = invoke("validate", "--data", "--sample", "5", str(path))
    assert "inputter.train: " in small.stdout and "(5 of 60 images inspected, drawn at random" in small.stdout


def test_sample_needs_data(tmp_path: Path, data: Path) -> None:
    result = invoke("validate", "--sample", "5", str(pipeline(tmp_path, data)))
    assert result.exit_code == 2 and "--sample only applies to --data" in result.output


def test_a_large_split_inspected_by_a_pool_reports_as_one_process_does(
    tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, first = line_of(data / "train.csv", 3)
    first.write_bytes(first.read_bytes()[:50])  # truncated: listed 5 times
    _, second = line_of(data / "train.csv", 40)
    second.unlink()
    path = pipeline(tmp_path, data)
    serial = invoke("validate", "--data", "--format", "json", str(path))
    started: list[int] = []
    real_pool = inspection.multiprocessing_pool

    def counting_pool(jobs: int):  # the real pool, counted
        started.append(jobs)
        return real_pool(jobs)

    monkeypatch.setattr(inspection, "SERIAL_FIRST", 7)
    monkeypatch.setattr(inspection, "jobs", lambda: 2)
    monkeypatch.setattr(inspection, "multiprocessing_pool", counting_pool)
    pooled = invoke("validate", "--data", "--format", "json", str(path))
    assert started == [2, 2]  # train's 300 rows and val's 30
    assert pooled.exit_code == serial.exit_code == 1
    assert json.loads(pooled.stdout) == json.loads(serial.stdout)
    assert len([d for d in json.loads(serial.stdout)["files"][0]["diagnostics"] if d["severity"] == "error"]) == 10
