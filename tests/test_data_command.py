"""`dslrun data`: the synthetic set is learnable and complete; CIFAR-10 conversion is safe and checked."""

from __future__ import annotations

import csv
import hashlib
import http.server
import io
import json
import socket
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from dsl.commands.data import command as data_command
from dsl.tasks.image_classification import _cifar10_download as cifar10
from dsl.tasks.image_classification import _cifar10_format as cifar10_format

RECORDS_PER_BATCH = 20


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(data_command, list(args), env=env, catch_exceptions=False)


def read_rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def batch_bytes(seed: int, count: int = RECORDS_PER_BATCH) -> bytes:
    rng = np.random.default_rng(seed)
    records = rng.integers(0, 256, (count, cifar10_format.RECORD_BYTES), dtype=np.uint8)
    records[:, 0] = np.arange(count) % 10
    return records.tobytes()


def make_tarball(path: Path, extra: list[tarfile.TarInfo] | None = None) -> dict[str, bytes]:
    """A tarball in the official layout, RECORDS_PER_BATCH records per batch file."""
    files = {name: batch_bytes(i) for i, name in enumerate([*cifar10_format.TRAIN_FILES, *cifar10_format.TEST_FILES])}
    files[cifar10_format.META_FILE] = "\n".join(cifar10_format.CLASS_NAMES).encode() + b"\n"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return files


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------ synthetic
def test_synthetic_writes_the_csv_png_layout(tmp_path):
    out = tmp_path / "syn"
    result = run("synthetic", "--out", str(out), "--num-train", "60", "--num-val", "30",
                 "--num-classes", "3", "--image-size", "12")
    assert result.exit_code == 0, result.output
    assert "wrote 60 train + 30 eval images" in result.output
    train, evaluation = read_rows(out / "train.csv"), read_rows(out / "eval.csv")
    assert train[0] == ["path", "label"] and evaluation[0] == ["path", "label"]
    assert len(train) == 61 and len(evaluation) == 31
    assert all(row[0].startswith("train/") for row in train[1:])
    assert {int(row[1]) for row in train[1:]} == {0, 1, 2}
    with Image.open(out / train[1][0]) as image:
        assert image.size == (12, 12) and image.mode == "RGB"
    assert (out / "classes.txt").read_text().split() == ["class_0", "class_1", "class_2"]
    assert json.loads((out / "dataset.json").read_text())["num_train"] == 60


def load_split(out: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    rows = read_rows(out / f"{name}.csv")[1:]
    images = np.stack([np.asarray(Image.open(out / path), dtype=np.float32) / 255 for path, _ in rows])
    return images.reshape(len(rows), -1), np.array([int(label) for _, label in rows])


def test_synthetic_set_is_learnable(tmp_path):
    """Class means differ, and even a nearest-class-mean classifier is far above chance."""
    out = tmp_path / "syn"
    assert run("synthetic", "--out", str(out), "--num-train", "300", "--num-val", "100",
               "--image-size", "16").exit_code == 0
    x_train, y_train = load_split(out, "train")
    x_val, y_val = load_split(out, "eval")
    means = np.stack([x_train[y_train == k].mean(0) for k in range(10)])
    gaps = np.linalg.norm(means[:, None] - means[None], axis=-1)[~np.eye(10, dtype=bool)]
    assert gaps.min() > 1.0  # every pair of classes looks different on average
    predicted = np.argmin(np.linalg.norm(x_val[:, None] - means[None], axis=-1), axis=1)
    assert (predicted == y_val).mean() > 0.5  # chance is 0.1


def test_synthetic_rerun_skips_a_complete_directory_and_redoes_an_interrupted_one(tmp_path):
    out = tmp_path / "syn"
    args = ("synthetic", "--out", str(out), "--num-train", "20", "--num-val", "10", "--image-size", "8")
    assert run(*args).exit_code == 0
    first = (out / "train" / "00000.png").stat().st_mtime_ns
    result = run(*args)
    assert "already complete" in result.output
    assert (out / "train" / "00000.png").stat().st_mtime_ns == first
    (out / "train.csv").unlink()  # as if interrupted before the end
    assert "wrote 20 train" in run(*args).output
    assert "wrote 40 train" in run(*args[:4], "40", *args[5:]).output  # other settings: written again
    assert len(read_rows(out / "train.csv")) == 41


def test_synthetic_same_seed_same_images(tmp_path):
    for name in ("a", "b"):
        run("synthetic", "--out", str(tmp_path / name), "--num-train", "10", "--num-val", "5", "--image-size", "8")
    assert (tmp_path / "a/train/00003.png").read_bytes() == (tmp_path / "b/train/00003.png").read_bytes()


# -------------------------------------------------------------------------------- cifar10
def test_cifar10_from_archive_converts_every_record(tmp_path):
    archive = tmp_path / "cifar-10-binary.tar.gz"
    files = make_tarball(archive)
    out = tmp_path / "cifar"
    result = run("cifar10", "--out", str(out), "--from-archive", str(archive), "--no-verify", "--keep-binary")
    assert result.exit_code == 0, result.output
    assert "wrote 100 train + 20 eval images" in result.output
    train, evaluation = read_rows(out / "train.csv")[1:], read_rows(out / "eval.csv")[1:]
    assert len(train) == 5 * RECORDS_PER_BATCH and len(evaluation) == RECORDS_PER_BATCH
    # Record 3 of data_batch_2 is train image 23: same label, same pixels (planes -> HWC).
    record = np.frombuffer(files["data_batch_2.bin"], np.uint8).reshape(-1, cifar10_format.RECORD_BYTES)[3]
    path, label = train[RECORDS_PER_BATCH + 3]
    assert path == "train/00023.png" and int(label) == record[0]
    expected = record[1:].reshape(3, 32, 32).transpose(1, 2, 0)
    np.testing.assert_array_equal(np.asarray(Image.open(out / path)), expected)
    assert (out / "cifar-10-batches-bin" / "test_batch.bin").read_bytes() == files["test_batch.bin"]
    assert (out / "classes.txt").read_text().split()[0] == "airplane"
    assert archive.exists()  # the user's archive is kept
    assert "already complete" in run("cifar10", "--out", str(out), "--from-archive", str(archive),
                                     "--no-verify", "--keep-binary").output


def test_cifar10_archive_md5_mismatch_names_both_sums(tmp_path):
    archive = tmp_path / "copy.tar.gz"
    make_tarball(archive)
    result = run("cifar10", "--out", str(tmp_path / "out"), "--from-archive", str(archive))
    assert result.exit_code == 1
    found = hashlib.md5(archive.read_bytes()).hexdigest()
    assert found in result.output and cifar10.MD5 in result.output and "--no-verify" in result.output
    assert not (tmp_path / "out" / "train.csv").exists()


def test_cifar10_offline_download_says_how_to_proceed(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/cifar-10-binary.tar.gz"
    result = run("cifar10", "--out", str(tmp_path / "out"), "--timeout", "5", env={cifar10.URL_ENV: url})
    assert result.exit_code == 1
    assert f"could not download {url}" in result.output and "--from-archive FILE" in result.output
    assert len(result.output.strip().splitlines()) == 2  # "downloading ..." then one error line
    assert not list((tmp_path / "out").glob("*.part"))


def test_cifar10_download_is_checked_against_the_official_md5(tmp_path):
    """A served archive that is not the official one is downloaded, then refused by its MD5."""
    served = tmp_path / "served"
    served.mkdir()
    make_tarball(served / "cifar-10-binary.tar.gz")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/cifar-10-binary.tar.gz"
        result = run("cifar10", "--out", str(tmp_path / "out"), "--url", url)
    finally:
        server.shutdown()
    assert result.exit_code == 1
    assert "downloaded archive" in result.output and cifar10.MD5 in result.output
    assert hashlib.md5((served / "cifar-10-binary.tar.gz").read_bytes()).hexdigest() in result.output


@pytest.mark.parametrize("name", ["../escape.bin", "/tmp/absolute.bin", "cifar-10-batches-bin/../../up.bin"])
def test_cifar10_archive_member_outside_the_target_is_refused(tmp_path, name):
    evil = tarfile.TarInfo(name)
    evil.size = 1
    archive = tmp_path / "evil.tar.gz"
    make_tarball(archive, extra=[evil])
    out = tmp_path / "out"
    result = run("cifar10", "--out", str(out), "--from-archive", str(archive), "--no-verify")
    assert result.exit_code == 1
    assert "would be written outside" in result.output and repr(name) in result.output
    assert not (tmp_path / "escape.bin").exists() and not (out / "train.csv").exists()


def test_cifar10_archive_with_a_link_is_refused(tmp_path):
    link = tarfile.TarInfo("cifar-10-batches-bin/link.bin")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    archive = tmp_path / "link.tar.gz"
    make_tarball(archive, extra=[link])
    result = run("cifar10", "--out", str(tmp_path / "out"), "--from-archive", str(archive), "--no-verify")
    assert result.exit_code == 1 and "link or special file" in result.output


def test_cifar10_no_verify_needs_an_archive(tmp_path):
    result = run("cifar10", "--out", str(tmp_path / "out"), "--no-verify")
    assert result.exit_code == 1 and "--no-verify applies only to --from-archive" in result.output


def test_cifar10_truncated_batch_is_an_error(tmp_path):
    archive = tmp_path / "short.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in [*cifar10_format.TRAIN_FILES, *cifar10_format.TEST_FILES]:
            data = batch_bytes(0)[:-5] if name == "data_batch_3.bin" else batch_bytes(0)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    result = run("cifar10", "--out", str(tmp_path / "out"), "--from-archive", str(archive), "--no-verify")
    assert result.exit_code == 1 and "data_batch_3.bin" in result.output and "3073" in result.output
