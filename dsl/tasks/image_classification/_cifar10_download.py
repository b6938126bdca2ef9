"""CIFAR-10: download the official binary tarball, check its MD5, convert it to CSV + PNG.

The binary version (not the Python pickles) is used on purpose: nothing downloaded is
ever unpickled. The tarball is never extracted as a whole: every member is checked first
(no absolute paths, no `..`, no links), then only the batch files are read, by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from dsl.datasets import layout
from dsl.language.errors import DslError
from dsl.tasks.image_classification._cifar10_format import (
    BINARY_FOLDER,
    CHANNELS,
    CLASS_NAMES,
    HEIGHT,
    LABEL_BYTES,
    META_FILE,
    RECORD_BYTES,
    TEST_FILES,
    TRAIN_FILES,
    WIDTH,
)

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
URL_ENV = "DSLRUN_CIFAR10_URL"  # a mirror (or, in tests, a closed port)
ARCHIVE_NAME = "cifar-10-binary.tar.gz"


@dataclass(frozen=True)
class Cifar10Request:
    """Where to write and where the archive comes from."""

    out: Path
    archive: Path | None = None  # a local copy of the tarball; None = download
    verify: bool = True
    keep_binary: bool = False
    force: bool = False
    url: str = ""
    timeout: float = 60.0


def prepare(request: Cifar10Request, log: Callable[[str], None] = print) -> tuple[bool, dict[str, int]]:
    """Make the CSV + PNG layout in `request.out`; returns (written, images per split)."""
    out = request.out
    manifest = {"kind": "cifar10", "keep_binary": request.keep_binary}
    if not request.force and layout.is_complete(out, manifest) and _binaries_present(out, request.keep_binary):
        return False, _manifest_counts(out)
    out.mkdir(parents=True, exist_ok=True)
    archive, downloaded = _archive(request, log)
    batches, meta = read_batches(archive, out)
    layout.begin(out)
    rows: dict[str, list[tuple[str, int]]] = {}
    train = [decode_batch(batches[name], name) for name in TRAIN_FILES]
    rows["train"] = _convert(out, "train", train, log)
    rows["eval"] = _convert(out, "eval", [decode_batch(batches[name], name) for name in TEST_FILES], log)
    if request.keep_binary:
        _write_binaries(out / BINARY_FOLDER, batches, meta)
    manifest.update({"train": len(rows["train"]), "eval": len(rows["eval"])})
    layout.finish(out, rows, _class_names(meta), manifest)
    if downloaded:
        archive.unlink(missing_ok=True)
    return True, {"train": len(rows["train"]), "eval": len(rows["eval"])}


def _manifest_counts(out: Path) -> dict[str, int]:
    found = json.loads((out / layout.MANIFEST).read_text())
    return {"train": int(found.get("train", 0)), "eval": int(found.get("eval", 0))}


def md5sum(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, target: Path, timeout: float, log: Callable[[str], None]) -> None:
    """`url` into `target` (via target.part, renamed when complete)."""
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "wb") as handle:
            total = int(response.headers.get("Content-Length") or 0)
            done, reported = 0, 0
            for chunk in iter(lambda: response.read(1 << 20), b""):
                handle.write(chunk)
                done += len(chunk)
                if total and done * 10 // total > reported:
                    reported = done * 10 // total
                    log(f"  {done >> 20} / {total >> 20} MiB")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        partial.unlink(missing_ok=True)
        reason = getattr(exc, "reason", None) or exc
        raise DslError(
            f"could not download {url}: {reason}; download it elsewhere and pass --from-archive FILE"
        ) from None
    os.replace(partial, target)


def read_batches(archive: Path, out: Path) -> tuple[dict[str, bytes], bytes | None]:
    """The batch files' bytes, by file name, after checking that every member is harmless."""
    wanted = {*TRAIN_FILES, *TEST_FILES, META_FILE}
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar.getmembers():
                _check_member(member, archive, out)
                name = PurePosixPath(member.name).name
                if member.isfile() and name in wanted:
                    found[name] = tar.extractfile(member).read()  # type: ignore[union-attr]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DslError(f"cannot read {archive}: {exc}; expected the CIFAR-10 binary tarball ({ARCHIVE_NAME})") from None
    missing = [name for name in (*TRAIN_FILES, *TEST_FILES) if name not in found]
    if missing:
        raise DslError(f"{archive} lacks {', '.join(missing)}; expected the CIFAR-10 binary tarball ({ARCHIVE_NAME})")
    return found, found.pop(META_FILE, None)


def decode_batch(data: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One binary batch as uint8 images (N, 32, 32, 3) and labels (N,)."""
    if not data or len(data) % RECORD_BYTES:
        raise DslError(f"{name} has {len(data)} bytes, not a multiple of the {RECORD_BYTES}-byte CIFAR-10 record")
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    if labels.max() >= len(CLASS_NAMES):
        raise DslError(f"{name} holds label {labels.max()}; CIFAR-10 labels are 0..9 (is this CIFAR-100?)")
    images = records[:, LABEL_BYTES:].reshape(-1, CHANNELS, HEIGHT, WIDTH).transpose(0, 2, 3, 1)
    return images, labels


def _check_member(member: tarfile.TarInfo, archive: Path, out: Path) -> None:
    """Refuse links, devices and members that would land outside the target folder."""
    path = PurePosixPath(member.name)
    if not (member.isfile() or member.isdir()):
        raise DslError(f"{archive}: member {member.name!r} is a link or special file; refusing the archive")
    target = out.resolve()
    if path.is_absolute() or not (target / member.name).resolve().is_relative_to(target):
        raise DslError(
            f"{archive}: member {member.name!r} would be written outside {out}; refusing the archive "
            "(it is not the official CIFAR-10 tarball)"
        )


def _archive(request: Cifar10Request, log: Callable[[str], None]) -> tuple[Path, bool]:
    """The archive to read, and whether it was downloaded here (and may be deleted later)."""
    if request.archive is not None:
        archive = request.archive.expanduser()
        if not archive.is_file():
            raise DslError(f"--from-archive {archive}: no such file")
        if request.verify:
            _verify(archive, "--from-archive file", "or pass --no-verify to use it anyway")
        return archive, False
    archive = request.out / ARCHIVE_NAME
    if archive.is_file() and md5sum(archive) == MD5:
        log(f"using the archive already downloaded in {archive}")
        return archive, True
    url = request.url or os.environ.get(URL_ENV) or URL
    log(f"downloading {url} ...")
    download(url, archive, request.timeout, log)
    _verify(archive, "downloaded archive", "delete it and download again")
    return archive, True


def _verify(archive: Path, what: str, fix: str) -> None:
    found = md5sum(archive)
    if found != MD5:
        raise DslError(
            f"the {what} {archive} has MD5 {found}, expected {MD5} (the official CIFAR-10 binary tarball); "
            f"it is corrupted or another file: {fix}"
        )


def _convert(out: Path, split: str, batches: list[tuple[np.ndarray, np.ndarray]], log: Callable[[str], None]) -> list[tuple[str, int]]:
    total = sum(len(labels) for _, labels in batches)
    rows: list[tuple[str, int]] = []
    for images, labels in batches:
        paths = layout.write_images(out, split, images, start=len(rows), total=total)
        rows.extend(zip(paths, labels.tolist()))
        log(f"  {split}: {len(rows)} / {total} images")
    return rows


def _write_binaries(folder: Path, batches: dict[str, bytes], meta: bytes | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in batches.items():
        temporary = folder / f"{name}.tmp"
        temporary.write_bytes(data)
        os.replace(temporary, folder / name)
    if meta is not None:
        (folder / META_FILE).write_bytes(meta)


def _binaries_present(out: Path, keep_binary: bool) -> bool:
    return not keep_binary or all((out / BINARY_FOLDER / name).is_file() for name in (*TRAIN_FILES, *TEST_FILES))


def _class_names(meta: bytes | None) -> list[str]:
    names = [line.strip() for line in (meta or b"").decode("ascii", "replace").splitlines() if line.strip()]
    return names if len(names) == len(CLASS_NAMES) else list(CLASS_NAMES)

