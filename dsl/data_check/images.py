"""The facts `dslrun validate --data` wants of one image: size, channels, content digest.

Pillow reads the header for size and mode and `verify()` checks the file's structure (PNG
chunk checksums) without decoding the pixels; the digest of the file's bytes finds the same
image listed in two splits. The cheap signature and end-marker checks come first, the same
ones `skip_corrupt` applies (dsl.inputters.files), so both call the same files bad.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

from dsl.inputters import TAIL_BYTES, bytes_problem


@dataclass(frozen=True)
class ImageFacts:
    """What one usable image is like."""

    width: int
    height: int
    mode: str  # Pillow's mode: RGB, L, RGBA, P (palette), ...
    channels: int
    digest: bytes


def digest_of(data: bytes) -> bytes:
    """The content digest two identical images share."""
    return hashlib.blake2b(data, digest_size=16).digest()


def inspect_file(path: str) -> ImageFacts | str:
    """The facts of the image file `path`, or why it is not a usable image."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return exc.strerror or str(exc)
    return inspect_bytes(data)


def inspect_bytes(data: bytes) -> ImageFacts | str:
    """The facts of an encoded image, or why it is not a usable one."""
    problem = bytes_problem(data[:8], data[-TAIL_BYTES:], len(data))
    if problem:
        return problem
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None  # a large image is no decompression bomb here: its pixels are never decoded
    try:
        with Image.open(io.BytesIO(data)) as image:
            (width, height), mode, channels = image.size, image.mode, len(image.getbands())
            image.verify()
    except Exception as exc:  # any decoder failure means the file is bad
        return f"cannot be decoded ({type(exc).__name__}: {exc})"
    return ImageFacts(width, height, mode, channels, digest_of(data))
