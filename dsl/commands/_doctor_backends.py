"""Which `runner.backend` values this installation can run, and why not (`dslrun doctor`).

Read from the facts `dslrun doctor` collected, so a user choosing between Horovod, the
collective backend and parameter servers sees at once what works here before writing YAML.
"""

from __future__ import annotations

from typing import Any


def backend_support(facts: dict[str, Any]) -> dict[str, str | None]:
    """Each backend mapped to None when it can run here, else the reason it cannot (with the fix)."""
    if not facts.get("tensorflow"):
        missing = "TensorFlow is not installed"
        return dict.fromkeys(("local", "horovod", "collective", "ps"), missing)
    horovod = facts.get("horovod")
    if horovod is None:
        horovod_problem: str | None = ("Horovod is not installed or does not import (make install builds it); "
                                       "the collective backend needs no build")
    elif not any(horovod["controllers"].values()):
        horovod_problem = "Horovod was built without Gloo and MPI: no controller can start ranks"
    else:
        horovod_problem = None
    return {
        "local": None,
        "horovod": horovod_problem,
        # MultiWorkerMirroredStrategy ships with TensorFlow: TF_CONFIG and ports are all it needs.
        "collective": None if facts.get("multi_worker_mirrored") else
        "this TensorFlow has no tf.distribute.MultiWorkerMirroredStrategy",
        "ps": None if facts.get("parameter_server") else "this TensorFlow has no tf.distribute.ParameterServerStrategy",
    }


def strategies(tf: Any) -> dict[str, bool]:
    """The tf.distribute strategies the collective and ps backends use, present or not."""
    return {
        "multi_worker_mirrored": hasattr(tf.distribute, "MultiWorkerMirroredStrategy"),
        "parameter_server": hasattr(tf.distribute, "ParameterServerStrategy"),
    }


def describe(support: dict[str, str | None]) -> list[str]:
    """One line per backend: `[X] name` when it can run, `[ ] name: why not` otherwise."""
    return [f"  [X] {name}" if why is None else f"  [ ] {name}: {why}" for name, why in support.items()]
