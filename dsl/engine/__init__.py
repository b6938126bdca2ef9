"""The training engine: compiler, loop and run directory. The package itself imports no TensorFlow
(dsl.engine.compiler.steps_per_epoch serves `validate --data`); its modules do."""

import os

from dsl.engine import _autograph_files, _native_logs

# Before TensorFlow is first imported: keep its C++ start-up chatter out of the user's log
# (TF >= 2.19 logs part of it before honouring the level: _native_logs filters that part).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_native_logs.install()
# autograph's modules are removed at exit by TensorFlow, the bytecode Python cached for them by this.
_autograph_files.install()
