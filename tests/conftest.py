"""Set before any test module imports TensorFlow: tf.keras is Keras 2 (tf_keras), as under dslrun.

dsl/__init__.py sets the same default; a test module that imports TensorFlow before any dsl
module would otherwise get Keras 3. Subprocesses the tests start inherit it.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
