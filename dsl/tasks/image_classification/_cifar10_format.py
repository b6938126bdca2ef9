"""CIFAR-10's binary format: the one home of its file names, record layout and class names.

Three places meet these files: `dslrun data cifar10` writes and checks them
(`dsl.tasks.image_classification._cifar10_download`), the `cifar10_binary` inputter checks their sizes without
TensorFlow (`dsl.tasks.image_classification.cifar10_binary`), and its reader decodes them while training
(`dsl.tasks.image_classification._readers`). Pure constants, so any of them may import this module.

A record is one label byte, then the R, G and B planes of a 32x32 image, row by row.
"""

from __future__ import annotations

HEIGHT = 32
WIDTH = 32
CHANNELS = 3
LABEL_BYTES = 1
IMAGE_BYTES = HEIGHT * WIDTH * CHANNELS
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES

# The tarball's folder, its batches (train: 50000 records, test: 10000) and its class names file.
BINARY_FOLDER = "cifar-10-batches-bin"
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILES = ("test_batch.bin",)
META_FILE = "batches.meta.txt"

# Label i is CLASS_NAMES[i] (the order of batches.meta.txt).
CLASS_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
