"""Image classification: an image in, one class out (CIFAR-10, CSV or folder listings, TFRecord, synthetic)."""
