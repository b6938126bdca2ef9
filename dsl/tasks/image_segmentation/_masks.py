"""The segmentation inputter's tf.data side: (image, mask) pairs decoded, checked and resized.

Private and TensorFlow-importing (the public module imports it inside `build`). The shared
order of `BaseInputter.dataset` applies unchanged: a raw example is the pair's paths plus
where it is listed (CSV index and line), so a mask found wrong while decoding stops the run
with one line naming the mask, its CSV and line (an Assert carrying ASSERT_MARKER, which
`explain_data_error` turns into a DslError). Images are resized to `image_shape`
(bilinear, antialiased, as every image inputter does), masks with nearest neighbour so
that a pixel keeps a class index.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import tensorflow as tf

from dsl.inputters.common import Listing
from dsl.inputters.files import header_problem
from dsl.inputters.pipeline import ASSERT_MARKER, BaseInputter, decoded_pixels, remember_listings, slices


class SegmentationInputter(BaseInputter):
    """Batches of (images float32 (B, H, W, C) in [0, 1], masks int32 (B, H, W)).

    `listings` maps a mode to its (images, masks) listings, pair i of both the same CSV row.
    """

    def __init__(self, params: dict[str, Any], listings: dict[str, tuple[Listing, Listing]]) -> None:
        super().__init__(params, tuple(params["image_shape"]), params["num_classes"])
        self.ignore_label: int | None = params["ignore_label"]
        self.class_names = params.get("class_names")
        self.skipped: dict[str, list[str]] = {}
        if params.get("skip_corrupt"):
            listings = {mode: self._without_unreadable(pair, mode) for mode, pair in listings.items()}
        self.listings = listings
        # Where each example is listed, as the Assert messages say it: one entry per CSV file.
        self._sources = [(images.key, path) for images, _ in listings.values() for _, path in images.csv_files]
        # explain_data_error looks in both for the file that failed and where it is listed.
        remember_listings([listing for pair in listings.values() for listing in pair])

    def facts(self) -> dict[str, Any]:
        """The image shape, the number of classes (and their names), the ignored mask value."""
        return {**super().facts(), "ignore_label": self.ignore_label}

    def num_examples(self, mode: str) -> int:
        pair = self.listings.get(mode)
        return len(pair[0]) if pair is not None else 0

    # ------------------------------------------------------------------------ internals
    def _raw(self, mode: str) -> tf.data.Dataset:
        images, masks = self.listings[mode]
        first = self._sources.index((images.key, images.csv_files[0][1]))
        starts = np.asarray([start for start, _ in images.csv_files], dtype=np.int64)
        source = first + np.searchsorted(starts, np.arange(len(images)), side="right") - 1
        return slices((images.paths, masks.paths, source.astype(np.int32), np.asarray(images.lines, np.int64)))

    def _decode(self, image_path: tf.Tensor, mask_path: tf.Tensor, source: tf.Tensor,
                line: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        where = tf.strings.join(["(listed in ", tf.gather([path for _, path in self._sources], source), " line ",
                                 tf.strings.as_string(line), ", ", tf.gather([key for key, _ in self._sources], source), ")"])
        height, width, channels = self.image_shape
        image = decoded_pixels(tf.io.read_file(image_path), channels)
        mask = tf.io.decode_image(tf.io.read_file(mask_path), channels=0, expand_animations=False, dtype=tf.uint8)
        mask = checked_mask(mask, tf.shape(image), self.num_classes, self.ignore_label, mask_path, where)
        image = tf.clip_by_value(tf.image.resize(image, [height, width], antialias=True), 0.0, 1.0)
        mask = tf.image.resize(mask[..., None], [height, width], method="nearest")[..., 0]
        image.set_shape([height, width, channels])
        mask.set_shape([height, width])
        return image, mask

    def _without_unreadable(self, pair: tuple[Listing, Listing], mode: str) -> tuple[Listing, Listing]:
        """`pair` without the rows whose image or mask is missing, not an image, or cut short."""
        images, masks = pair
        kept = (Listing(images.key), Listing(masks.key))
        starts = dict(images.csv_files)
        skipped: list[str] = []
        for index, (image, mask) in enumerate(zip(images.paths, masks.paths)):
            if index in starts:
                for listing in kept:
                    listing.start_csv(starts[index])
            problem = next(((path, p) for path in (image, mask) if (p := header_problem(path))), None)
            if problem:
                skipped.append(f"{problem[0]} ({images.origin(index)}): {problem[1]}")
                continue
            kept[0].add(image, 0, images.lines[index])
            kept[1].add(mask, 0, masks.lines[index])
        if skipped:
            self.skipped[mode] = skipped
            print(f"dslrun: warning: {images.key}: skip_corrupt skipped {len(skipped)} of {len(images)} examples whose "
                  f"image or mask is missing, not an image or truncated; the first: {skipped[0]}",
                  file=sys.stderr, flush=True)
        return kept


def checked_mask(mask: tf.Tensor, image_shape: tf.Tensor, num_classes: int, ignore_label: int | None,
                 mask_path: tf.Tensor, where: tf.Tensor) -> tf.Tensor:
    """A decoded mask (H, W, channels) as int32 (H, W), failing with a located message when it is
    not single-channel, not its image's size, or holds a value that is neither a class nor ignore_label."""
    single = tf.debugging.Assert(tf.equal(tf.shape(mask)[-1], 1), [
        ASSERT_MARKER, "mask", mask_path, where, "has", tf.shape(mask)[-1],
        "channels; a mask is a single-channel PNG of class indices, convert colour-coded masks first",
    ], summarize=1)
    size = tf.shape(mask)[:2]
    same = tf.debugging.Assert(tf.reduce_all(tf.equal(size, image_shape[:2])), [
        ASSERT_MARKER, "mask", mask_path, where, "is", size[0], "x", size[1], "pixels but its image is",
        image_shape[0], "x", image_shape[1], "; a mask must have its image's size",
    ], summarize=1)
    with tf.control_dependencies([single, same]):
        mask = tf.cast(mask[..., 0], tf.int32)
    bad = mask >= num_classes
    if ignore_label is not None:
        bad = tf.logical_and(bad, tf.not_equal(mask, ignore_label))
    allowed = f"classes 0..{num_classes - 1}" + (f" or ignore_label {ignore_label}" if ignore_label is not None else "")
    valid = tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [
        ASSERT_MARKER, "mask", mask_path, where, "has the value", tf.reduce_max(tf.where(bad, mask, 0)),
        f"which is none of {allowed}; fix the mask or set inputter.num_classes / inputter.ignore_label",
    ], summarize=1)
    with tf.control_dependencies([valid]):
        return tf.identity(mask)
