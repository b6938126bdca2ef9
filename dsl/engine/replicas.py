"""One model on every replica: the state each replica updates from its own data is averaged.

Gradients are averaged by the backend before they are applied, so trainable weights stay
equal on every rank. Some state is updated in the forward pass instead, from the rank's
own batch: BatchNormalization's moving mean and variance, and any other non-trainable
variable a layer keeps. Left alone, every rank ends up with statistics of its own shard,
validates with them, and rank 0 checkpoints only its own.

The shared train call therefore ends with these variables replaced by their average over
the replicas (one fused allreduce per call, measured in docs/benchmarks.md). A moving
average is linear in the batches it has seen, so averaging after every call gives the
same statistics as averaging once at the end, and every hook, validation, checkpoint and
the end-of-run digest sees one model. TensorFlow's MirroredStrategy does the same for its
BatchNormalization variables (aggregation MEAN, read as the average across replicas).

The average of unequal per-rank variances is not the variance of the whole batch; for
small per-rank batches the backend's `sync_batch_norm` (on by default below 16 examples per
replica, dsl/sync_batch_norm.py) computes the batch statistics over all ranks instead.
"""

from __future__ import annotations

import hashlib

import tensorflow as tf

from dsl.engine.contracts import Average, Backend


def replica_local_variables(model: tf.keras.Model) -> list[tf.Variable]:
    """The model's variables that each replica updates itself: floating-point, non-trainable,
    in a layer that trains.

    A frozen layer's variables never change, so they are equal everywhere already and are
    left out (averaging equal values over 3 ranks can still move them by a rounding error).
    Read when the train call is traced, after callbacks like `init_checkpoint` froze layers.
    """
    frozen = {v.ref() for layer in model.submodules
              if isinstance(layer, tf.keras.layers.Layer) and not layer.trainable for v in layer.variables}
    chosen, seen = [], set()
    for variable in model.non_trainable_variables:
        if variable.dtype.is_floating and variable.ref() not in frozen and variable.ref() not in seen:
            seen.add(variable.ref())
            chosen.append(variable)
    return chosen


def has_batch_norm(model: tf.keras.Model) -> bool:
    """Whether the built network normalises batches (what `sync_batch_norm: auto` asks of it)."""
    return any(isinstance(layer, tf.keras.layers.BatchNormalization) for layer in model.submodules)


def reconcile(variables: list[tf.Variable], average: Average) -> None:
    """Set every variable to its average over the replicas (inside the compiled train call)."""
    if not variables:
        return
    for variable, value in zip(variables, average([v.read_value() for v in variables])):
        variable.assign(value)


def weights_digest(model: tf.keras.Model) -> str:
    """SHA-256 of every model variable's bytes: equal digests mean identical weights (the
    end-of-run check that every replica holds one model)."""
    digest = hashlib.sha256()
    for variable in model.variables:
        digest.update(variable.name.encode())
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()


def replicas_agree(backend: Backend, model: tf.keras.Model) -> tuple[bool, str]:
    """Whether every replica ended with the same weights, and a line saying so or which differ."""
    digests: list[str] = backend.gather_strings(weights_digest(model))
    if len(set(digests)) == 1:
        return True, f"weights digest {digests[0][:16]} identical on all {len(digests)} ranks"
    differing = [rank for rank, d in enumerate(digests) if d != digests[0]]
    return False, f"the ranks ended with different weights (ranks {differing} differ from rank 0)"
