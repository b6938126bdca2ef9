"""The tf.data pipeline every inputter shares, and data errors explained as one line.

Private and TensorFlow-importing: only functions of the public inputter modules import it.

One order for every inputter, chosen so that ranks see disjoint data and epochs are
reproducible from (seed, epoch):

    raw examples (paths, records, indices) -> shard -> shuffle -> decode -> augment -> batch -> prefetch

With `cache: true` the decoded images are kept in memory instead and shuffled there:

    raw examples -> shard -> decode -> cache (filled once, reused by every epoch) -> shuffle -> augment -> ...

The augment step maps `(features, targets) -> (features, targets)` (the augmenter's `train`,
or its `eval` on the features). A transform that accepts a `seed` keyword gets a
per-example stateless seed derived from the dataset's seed and the example's position,
so an epoch's augmentation is the same after a resume and independent of how the
parallel map schedules its work.
"""

from __future__ import annotations

import inspect
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from dsl.distributed.scaling import steps_per_epoch
from dsl.inputters.common import MODES, Listing
from dsl.inputters.files import IMAGE_FORMATS, SIGNATURES, header_problem
from dsl.language.errors import DslError, clean_error

AUTOTUNE = tf.data.AUTOTUNE
ASSERT_MARKER = "dslrun-data-error"
# How long explain_data_error may look for the image that failed to decode.
SCAN_SECONDS = 60.0


# The listings of the inputter built last in this process, so that a failed decode deep
# inside tf.data can be traced back to a file (explain_data_error).
_LISTINGS: list[Listing] = []


def remember_listings(listings: list[Listing]) -> None:
    _LISTINGS[:] = listings


def decoded_pixels(contents: tf.Tensor, channels: int) -> tf.Tensor:
    """An encoded image file (one of `IMAGE_EXTENSIONS`' formats) as float32 (H, W, `channels`) in
    [0, 1], at its own size. TensorFlow decodes BMP and GIF to 3 channels only: for a 1-channel
    pipeline those are decoded so and made grey (PNG and JPEG as before, by their own decoder)."""
    def decode(wanted: int) -> tf.Tensor:
        return tf.io.decode_image(contents, channels=wanted, expand_animations=False, dtype=tf.float32)

    if channels != 1:
        return decode(channels)
    three_only = tf.strings.regex_full_match(tf.strings.substr(contents, 0, 2), "BM|GI")
    return tf.cond(three_only, lambda: tf.image.rgb_to_grayscale(decode(3)), lambda: decode(1))


def decode_image(contents: tf.Tensor, image_shape: tuple[int, int, int]) -> tf.Tensor:
    """Encoded image bytes as float32 (H, W, C) in [0, 1] with the static `image_shape`."""
    height, width, channels = image_shape
    image = decoded_pixels(contents, channels)
    image = tf.image.resize(image, [height, width], antialias=True)
    image = tf.clip_by_value(image, 0.0, 1.0)
    image.set_shape([height, width, channels])
    return image


def fit_image(image: tf.Tensor, image_shape: tuple[int, int, int]) -> tf.Tensor:
    """A float image of any size and 1 or 3 channels resized and converted to `image_shape`."""
    height, width, channels = image_shape
    if image.shape[-1] != channels:
        image = tf.image.rgb_to_grayscale(image) if channels == 1 else tf.image.grayscale_to_rgb(image)
    if tuple(image.shape[:2]) != (height, width):
        image = tf.clip_by_value(tf.image.resize(image, [height, width], antialias=True), 0.0, 1.0)
    image.set_shape([height, width, channels])
    return image


def label_checked(label: tf.Tensor, num_classes: int, where: Any) -> tf.Tensor:
    """`label` as int32, failing with a message naming `where` when it is outside 0..num_classes-1."""
    label = tf.cast(label, tf.int32)
    valid = tf.logical_and(label >= 0, label < num_classes)
    check = tf.debugging.Assert(
        valid, [ASSERT_MARKER, "label", label, f"is outside 0..{num_classes - 1} in", where], summarize=1
    )
    with tf.control_dependencies([check]):
        return tf.identity(label)


def parallelism(value: str | int) -> int:
    """A `num_parallel_calls` / `prefetch` setting as tf.data wants it."""
    return AUTOTUNE if value == "autotune" else int(value)



# Added to the seed per shard (times its index): every rank shuffles its shard its own way.
SHARD_SEED_STRIDE = 1_000_003

class BaseInputter:
    """The shared `dataset()`; subclasses say what a raw example is and how to decode it.

    Subclasses implement `_raw(mode)` (an unbatched dataset of raw examples, not yet
    sharded), `_decode(raw)` -> (image float32 (H, W, C), label int32) and `num_examples`.
    """

    image_shape: tuple[int, int, int]
    num_classes: int
    class_names: list[str] | None = None

    def __init__(self, params: dict[str, Any], image_shape: tuple[int, int, int], num_classes: int) -> None:
        self.params = params
        self.image_shape = tuple(int(v) for v in image_shape)  # type: ignore[assignment]
        self.num_classes = int(num_classes)
        self._cached: dict[tuple[str, int, int], tf.data.Dataset] = {}
        remember_listings([])  # file lists of an inputter built before this one no longer apply

    # ---------------------------------------------------------------- the Inputter protocol
    def has_source(self, mode: str) -> bool:
        return self.num_examples(mode) > 0

    def num_examples(self, mode: str) -> int:
        raise NotImplementedError

    def steps_per_epoch(self, batch_size: int | None, world_size: int) -> int | None:
        if not self.has_source("train"):
            return None
        return steps_per_epoch(self.num_examples("train"), batch_size or self.params["batch_size"], world_size,
                               self.params.get("drop_remainder", True))

    def explain_error(self, exc: Any) -> DslError | None:
        return explain_data_error(exc)

    def skipped_examples(self, mode: str) -> int | None:
        skipped: dict[str, list[str]] | None = getattr(self, "skipped", None)  # listing inputters count them
        return len(skipped.get(mode, [])) if self.params.get("skip_corrupt") and skipped is not None else None

    def dataset(
        self,
        mode: str,
        augment: Callable[..., tf.Tensor] | None = None,
        num_shards: int = 1,
        shard_index: int = 0,
        seed: int | tf.Tensor | None = None,
        batch_size: int | None = None,
        skip: int | tf.Tensor = 0,
    ) -> tf.data.Dataset:
        """Batches of (images float32 (B, H, W, C), labels int32 (B,)) for `mode`; see the module doc.

        `skip` train batches are left out at the start, as raw examples before they are decoded:
        resuming at step 10,000 of an ImageNet epoch used to decode and augment 640,000 images to
        throw them away (docs/benchmarks.md, "Cost of scale: data"). The augmentation seeds
        keep their positions, so the batches that follow are those of an uninterrupted epoch.
        """
        self._check_mode(mode)
        calls = parallelism(self.params["num_parallel_calls"])
        skipped = skipped_examples(skip, batch_size or self.params["batch_size"])
        if self.params["cache"]:
            data = self._cached_decoded(mode, num_shards, shard_index)
            data = leave_out(self._shuffled(data, mode, num_shards, seed, shard_index), skipped)
        elif self.params.get("skip_corrupt"):  # which examples fill an epoch is known after decoding only
            data = self._raw(mode).shard(num_shards, shard_index)
            data = self._shuffled(data, mode, num_shards, seed, shard_index)
            data = data.map(self._decode, num_parallel_calls=calls)
            data = leave_out(self._skipping_corrupt(data, mode, num_shards, shard_index), skipped)
        else:
            data = self._raw(mode).shard(num_shards, shard_index)
            data = leave_out(self._shuffled(data, mode, num_shards, seed, shard_index), skipped)
            data = data.map(self._decode, num_parallel_calls=calls)
        return self._augmented_batches(data, mode, augment, num_shards, shard_index, seed, calls, batch_size, skipped)

    def examples_dataset(self, examples: Any, mode: str, augment: Callable[..., Any] | None = None,
                         num_shards: Any = 1, shard_index: Any = 0, seed: int | tf.Tensor | None = None,
                         batch_size: int | None = None, skip: int | tf.Tensor = 0) -> tf.data.Dataset:
        """Batches of examples held in memory (`examples`: the (features, targets) arrays of
        `mode`), in the shared order: shard, shuffle (train), augment, batch, prefetch. What an
        inputter that reads its whole data when it is built returns from `dataset` (texts as
        token ids, rows of numbers), in dslrun or in a plug-in. `skip` as in `dataset`."""
        self._check_mode(mode)
        skipped = skipped_examples(skip, batch_size or self.params["batch_size"])
        data = slices(examples).shard(num_shards, shard_index)
        data = leave_out(self._shuffled(data, mode, num_shards, seed, shard_index), skipped)
        return self._augmented_batches(data, mode, augment, num_shards, shard_index, seed, AUTOTUNE, batch_size,
                                       skipped)

    def _augmented_batches(self, data: tf.data.Dataset, mode: str, augment: Callable[..., Any] | None,
                           num_shards: int, shard_index: int, seed: int | tf.Tensor | None, calls: int,
                           batch_size: int | None = None, skipped: int | tf.Tensor = 0) -> tf.data.Dataset:
        """The tail of every inputter's pipeline: augment (when it changes anything), batch, prefetch.
        `skipped` examples were left out before `data`: the augmentation seeds count from there."""
        train = mode == "train"
        if augment is not None and changes_data(augment):
            data = _augmented(data, augment, seed if train else None, num_shards, shard_index, calls, skipped)
        data = data.batch(batch_size or self.params["batch_size"], drop_remainder=train and self.params["drop_remainder"])
        prefetch = parallelism(self.params["prefetch"])
        return data.prefetch(prefetch) if prefetch != 0 else data

    def facts(self) -> dict[str, Any]:
        """The image shape and number of classes (and their names, when the data has them)."""
        facts: dict[str, Any] = {"image_shape": self.image_shape, "num_classes": self.num_classes}
        if self.class_names:
            facts["class_names"] = list(self.class_names)
        return facts

    def decode_file(self, path: str) -> tf.Tensor:
        """One image file as float32 (H, W, C) in [0, 1], resized to `image_shape` (for predict)."""
        return decode_image(tf.io.read_file(path), self.image_shape)

    def serving_inputs(self) -> list[Any]:
        """Pixels in [0, 1] of the trained shape, and encoded image files of any size."""
        from dsl.inputters.serving import image_inputs

        return image_inputs(self.image_shape, decode_image)

    def predict_inputs(self, paths: list[str], texts: list[str]) -> list[tuple[dict[str, Any], tf.Tensor]]:
        """Image files, all checked before any is decoded: one error line per bad file."""
        if texts:
            raise DslError("--text is for text pipelines; this pipeline's inputter reads images: name image files")
        problems = [f"cannot read image {path}: {problem}" for path in paths if (problem := header_problem(path))]
        if problems:
            raise DslError("\n".join(problems))
        examples = []
        for path in paths:
            try:
                examples.append(({"image": path}, self.decode_file(path)))
            except (tf.errors.OpError, OSError) as exc:
                raise DslError(f"cannot read image {path}: {clean_error(getattr(exc, 'message', str(exc)))}") from None
        return examples

    # ------------------------------------------------------------------------ internals
    def _raw(self, mode: str) -> tf.data.Dataset:
        raise NotImplementedError

    def _decode(self, *raw: Any) -> tuple[tf.Tensor, tf.Tensor]:
        raise NotImplementedError

    def _check_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not self.has_source(mode):
            raise DslError(f"the inputter has no {mode} data; set inputter.{mode}")

    def _shuffled(self, data: tf.data.Dataset, mode: str, num_shards: int, seed: int | tf.Tensor | None,
                  shard_index: int | tf.Tensor = 0) -> tf.data.Dataset:
        """This rank's shard in an order of its own.

        Each shard is shuffled with its own seed (`seed` on the first, one process's order
        unchanged): with one seed for all, every rank put the same positions of its shard
        into a step, and since a shard holds every N-th example of a listing, a step's global
        batch held N neighbours of the listing at each position — of one class where the
        listing is sorted by class (an image folder), and a multi-rank run learned far slower.
        """
        buffer = self.params["shuffle_buffer"]
        if mode != "train" or buffer == 0:
            return data
        # A buffer larger than this rank's share only costs memory.
        buffer = min(buffer, max(1, -(-self.num_examples(mode) // num_shards)))
        if seed is not None:
            seed = seed + shard_index * SHARD_SEED_STRIDE
        return data.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)

    def _skipping_corrupt(self, data: tf.data.Dataset, mode: str, num_shards: int, shard_index: int) -> tf.data.Dataset:
        """With `skip_corrupt`, drop examples whose decoding fails, keeping the shard's length.

        The gaps are filled from the start of the same (shuffled) order, so an epoch has as
        many batches as without skipping: every rank runs the same number of steps, and the
        val/test passes end where the runner expects them to.
        """
        if not self.params.get("skip_corrupt"):
            return data
        total = self.num_examples(mode)
        shard_length = total // num_shards + (1 if shard_index < total % num_shards else 0)
        return data.ignore_errors().repeat().take(shard_length)

    def _cached_decoded(self, mode: str, num_shards: int, shard_index: int) -> tf.data.Dataset:
        """Decoded examples of one shard, decoded once per process and kept in memory.

        The cache is filled right away by one full pass: an epoch that stops early (drop
        remainder, val_steps) would otherwise leave it unfinished, and TensorFlow throws a
        partial cache away. Built eagerly even when called while an epoch's dataset is
        traced, so every epoch reads the one cache.
        """
        key = (mode, num_shards, shard_index)
        # Outside any graph: the train data's epochs are built inside a tf.data function.
        with tf.init_scope():
            if key not in self._cached:
                calls = parallelism(self.params["num_parallel_calls"])
                data = self._raw(mode).shard(num_shards, shard_index).map(self._decode, num_parallel_calls=calls)
                data = self._skipping_corrupt(data, mode, num_shards, shard_index).cache()
                for _ in data.batch(256):
                    pass
                self._cached[key] = data
        return self._cached[key]


class FileListInputter(BaseInputter):
    """An inputter whose examples are image files listed in Python (CSV, image folder)."""

    def __init__(
        self, params: dict[str, Any], listings: dict[str, Listing], image_shape: tuple[int, int, int], num_classes: int
    ) -> None:
        super().__init__(params, image_shape, num_classes)
        self.skipped: dict[str, list[str]] = {}
        if params.get("skip_corrupt"):
            listings = {mode: self._without_unreadable(listing, mode) for mode, listing in listings.items()}
        self.listings = listings
        remember_listings(list(listings.values()))

    def _without_unreadable(self, listing: Listing, mode: str) -> Listing:
        """`listing` without the files that are missing, not images, or cut short.

        Checked by their first bytes and their end marker (one open and two small reads
        each), so they are counted up front. Files that pass and still fail to decode
        (damaged inside) are dropped while training instead, uncounted.
        """
        kept = Listing(listing.key, csv_files=[])
        skipped: list[str] = []
        csv_starts = dict(listing.csv_files)
        for index, path in enumerate(listing.paths):
            if index in csv_starts:
                kept.start_csv(csv_starts[index])
            problem = header_problem(path)
            if problem:
                skipped.append(f"{path} ({listing.origin(index)}): {problem}")
                continue
            kept.add(path, listing.labels[index], listing.lines[index])
        if skipped:
            self.skipped[mode] = skipped
            print(
                f"dslrun: warning: {listing.key}: skip_corrupt skipped {len(skipped)} of {len(listing)} examples "
                f"that are missing, not images or truncated; the first: {skipped[0]}",
                file=sys.stderr, flush=True,
            )
        return kept

    def num_examples(self, mode: str) -> int:
        listing = self.listings.get(mode)
        return len(listing) if listing is not None else 0

    def _raw(self, mode: str) -> tf.data.Dataset:
        listing = self.listings[mode]
        return slices((listing.paths, np.asarray(listing.labels, dtype=np.int32)))

    def _decode(self, path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return decode_image(tf.io.read_file(path), self.image_shape), label


def changes_data(augment: Callable[..., Any] | None) -> bool:
    """Whether `augment` must be mapped over the examples: not when absent, nor when it (or
    the augmenter it is a method of) declares `changes_data = False` (`none`), whose map
    would only cost tf.data CPU for every example."""
    if augment is None:
        return False
    declared = getattr(augment, "changes_data", None)
    if declared is None:
        declared = getattr(getattr(augment, "__self__", None), "changes_data", True)
    return bool(declared)


def slices(values: Any) -> tf.data.Dataset:
    """`tf.data.Dataset.from_tensor_slices(values)`, the values made tensors eagerly even when this
    is called inside a traced function, as the loop's one dataset over every epoch traces the
    inputter (dsl.engine.data_feed). Traced, a Python list or a NumPy array became a constant of
    the function's graph, copied as the graph was: a listing of ImageNet's 1.28 million paths
    cost a minute and 2 GB before the first step (docs/benchmarks.md, "Cost of scale: data").
    An eager tensor is captured by reference. A list is one tensor (of strings, say)."""
    with tf.init_scope():
        tensors = _tensors(values)
    return tf.data.Dataset.from_tensor_slices(tensors)


def _tensors(values: Any) -> Any:
    if isinstance(values, dict):
        return {key: _tensors(value) for key, value in values.items()}
    if isinstance(values, tuple):
        return tuple(_tensors(value) for value in values)
    return tf.convert_to_tensor(values)


def skipped_examples(skip: int | tf.Tensor, batch_size: int) -> int | tf.Tensor:
    """The examples in `skip` batches (the int 0 when nothing is skipped: no op is added)."""
    if isinstance(skip, int) and skip == 0:
        return 0
    return tf.cast(skip, tf.int64) * batch_size


def leave_out(data: tf.data.Dataset, examples: int | tf.Tensor) -> tf.data.Dataset:
    """`data` without its first `examples` (unchanged for the int 0)."""
    return data if isinstance(examples, int) and examples == 0 else data.skip(examples)


def _augmented(
    data: tf.data.Dataset,
    augment: Callable[..., Any],
    seed: int | tf.Tensor | None,
    num_shards: int,
    shard_index: int,
    calls: int,
    start: int | tf.Tensor = 0,
) -> tf.data.Dataset:
    """`augment` mapped over the examples; with a seed, each example gets its own stateless seed
    (from its position in the epoch: `start` for the first one of `data`)."""
    if seed is None or not _accepts_seed(augment):
        return data.map(lambda features, targets: augment(features, targets), num_parallel_calls=calls)

    def seeded(position: tf.Tensor, example: tuple[Any, Any]) -> tuple[Any, Any]:
        features, targets = example
        # The position over all ranks, so that no two examples of an epoch share a seed.
        index = position * num_shards + shard_index
        return augment(features, targets, seed=tf.stack([tf.cast(seed, tf.int64), index]))  # type: ignore[no-any-return]

    numbered = data.enumerate() if isinstance(start, int) and start == 0 else data.enumerate(start=start)
    return numbered.map(seeded, num_parallel_calls=calls)


def _accepts_seed(function: Callable[..., Any]) -> bool:
    try:
        return "seed" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------ errors
_PATH_ERROR = re.compile(r"(?P<path>.+?); (?P<reason>No such file or directory|Permission denied|Is a directory)")
_DECODE_HINTS = ("Invalid PNG data", "Invalid JPEG data", "Unknown image file format", "Input is empty",
                 "decode_image", "DecodeImage", "DecodePng", "DecodeJpeg")


def explain_data_error(exc: tf.errors.OpError) -> DslError | None:
    """A TensorFlow error raised while iterating a dataset, as one line naming the file at fault.

    Returns None when the error does not come from the data (the caller reports it as is).
    """
    raw = exc.message or str(exc)
    message = clean_error(raw)
    if ASSERT_MARKER in message:
        return DslError(_assert_text(message))
    found = _PATH_ERROR.search(message)
    # A directory where an image is expected: FailedPrecondition ("...; Is a directory").
    if isinstance(exc, (tf.errors.NotFoundError, tf.errors.PermissionDeniedError,
                        tf.errors.FailedPreconditionError)) and found:
        path = found.group("path").strip()
        return DslError(f"cannot read image {path}{_origin(path)}: {found.group('reason')}; fix the listing or the file")
    if isinstance(exc, tf.errors.InvalidArgumentError) and any(hint in raw for hint in _DECODE_HINTS):
        return DslError(_find_undecodable(message))
    if isinstance(exc, tf.errors.DataLossError):
        return DslError(f"a data file is corrupted or truncated: {message}; re-create or re-download it")
    return None


def _assert_text(message: str) -> str:
    parts = re.findall(r"\[([^\[\]]*)\]", message.split(ASSERT_MARKER, 1)[1])
    return " ".join(part.strip() for part in parts if part.strip())


def _origin(path: str) -> str:
    for listing in _LISTINGS:
        if path in listing.paths:
            return f" (listed in {listing.origin(listing.paths.index(path))}, {listing.key})"
    return ""


def _find_undecodable(message: str) -> str:
    """Look through the listed files for the one that cannot be decoded; say which."""
    started = time.monotonic()
    checked = 0
    for listing in _LISTINGS:
        for index, path in enumerate(listing.paths):
            problem = _image_problem(path)
            if problem:
                where = f"listed in {listing.origin(index)}, {listing.key}"
                return f"cannot use image {path} ({where}): {problem}; replace or remove it"
            checked += 1
            if time.monotonic() - started > SCAN_SECONDS:
                return (f"an image could not be decoded ({message}); the first {checked} listed files look fine, "
                        "so check the rest, e.g. with Pillow")
    return f"an image could not be decoded: {message}; make sure every image of the data is a valid {IMAGE_FORMATS} file"


def _image_problem(path: str) -> str | None:
    """Why `path` is not a decodable image, or None when it looks fine."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not head:
        return "the file is empty"
    if not head.startswith(SIGNATURES):
        return f"not a {IMAGE_FORMATS} file"
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow comes with the train extra
        return None
    try:
        with Image.open(path) as image:
            image.load()
    except Exception as exc:  # any decoder failure means the file is bad
        return f"{type(exc).__name__}: {exc}"
    return None
