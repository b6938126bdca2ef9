"""Modelers components: one module per registered type (see dsl.registry)."""

from dsl.modelers._optimizers import OPTIMIZER_KEYS

# Each optimizer type with a `momentum` setting (a heavy ball), and its default: read by
# dsl.scaling (asynchronous workers lower it) without TensorFlow.
MOMENTUM_DEFAULTS: dict[str, float] = dict(OPTIMIZER_KEYS["momentum"][1])
