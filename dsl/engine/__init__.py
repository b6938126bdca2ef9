"""The training engine: compiler, loop and run directory. Imports TensorFlow."""
