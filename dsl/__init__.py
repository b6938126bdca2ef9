"""dslrun: declarative training pipelines.

This is the one place that picks dslrun's Keras: with `TF_USE_LEGACY_KERAS=1`, TensorFlow >= 2.16
serves `tf.keras` from the `tf_keras` package (Keras 2), which the engine, the backends (Horovod's
DistributedGradientTape, ParameterServerStrategy, MultiWorkerMirroredStrategy) and every
checkpoint written so far are built on. Every module of dslrun is imported after this one (the
`dslrun` script, `python -m dsl`, the tests), and TensorFlow reads the variable when it is first
imported, so it is set here before anything can import TensorFlow. Child processes (horovodrun,
mpirun, `dslrun launch`, Slurm steps) inherit it from the environment. A user's own value wins:
a later move to Keras 3 starts by changing this default.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

__version__ = "0.2.0"
