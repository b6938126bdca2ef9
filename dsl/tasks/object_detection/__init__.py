"""Object detection: an image in, boxes with classes out (box CSV or COCO JSON; a single-stage RetinaNet)."""
