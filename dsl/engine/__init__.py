"""The training engine: compiler, loop and run directory. Imports TensorFlow."""

import os

# Before TensorFlow is first imported: keep its C++ start-up chatter out of the user's log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
