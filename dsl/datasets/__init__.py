"""Data sets made on disk by `dslrun data`: CIFAR-10 (downloaded) and a learnable synthetic set.

Both are written in the CSV + PNG layout of `dsl.datasets.layout`, which the
`image_classification_csv` inputter reads. Nothing here imports TensorFlow: numpy and
Pillow write the images.
"""
