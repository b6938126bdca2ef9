"""Is this file a usable image? The cheap checks, without TensorFlow.

Shared by `skip_corrupt` (which drops such files when the inputter is built) and
`dslrun validate --data` (which reports them, located), so both call the same file bad.
A file is checked by its first bytes (a PNG, JPEG, GIF or BMP signature) and, for PNG
and JPEG, by the end marker their last chunk carries: a file cut short (an interrupted
download or copy) lacks it.
"""

from __future__ import annotations

# The image files dslrun reads, by name: what tf.io.decode_image decodes (a GIF's first frame).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
IMAGE_FORMATS = "PNG, JPEG, BMP or GIF"
SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")

# The marker each format's last chunk carries, looked for in the last KiB (some writers pad after it).
ENDINGS = {b"\x89PNG\r\n\x1a\n": b"IEND", b"\xff\xd8\xff": b"\xff\xd9"}
TAIL_BYTES = 1024


def header_problem(path: str) -> str | None:
    """Why `path` is clearly not a usable image (missing, empty, wrong signature, cut short), or None.

    Reads the first 8 bytes and the last KiB only: cheap enough to run on every listed file.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            size = handle.seek(0, 2)
            handle.seek(max(0, size - TAIL_BYTES))
            tail = handle.read()
    except OSError as exc:
        return exc.strerror or str(exc)
    return bytes_problem(head, tail, size)


def bytes_problem(head: bytes, tail: bytes, size: int) -> str | None:
    """`header_problem` for bytes already read: the first 8, the last KiB and the size."""
    if not size:
        return "the file is empty"
    if not head.startswith(SIGNATURES):
        return f"not a {IMAGE_FORMATS} file"
    for signature, ending in ENDINGS.items():
        if head.startswith(signature) and ending not in tail:
            return f"truncated (no end marker in its {size} bytes)"
    return None
