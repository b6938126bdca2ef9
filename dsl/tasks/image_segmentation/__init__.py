"""Image segmentation: an image in, a class per pixel out (CSV of image and PNG mask pairs; FCN, U-Net)."""
