"""Which `runner.backend` values this installation can run, and why not (`dslrun doctor`).

Read from the facts `dslrun doctor` collected, so a user choosing between Horovod, the
collective backend and parameter servers sees at once what works here before writing YAML.
What each backend needs is declared by its registration (dsl.language.backend_registry, `doctor`).
"""

from __future__ import annotations

from typing import Any

from dsl.language import backend_registry


def backend_support(facts: dict[str, Any]) -> dict[str, str | None]:
    """Each registered backend mapped to None when it can run here, else the reason it cannot
    (with the fix): TensorFlow first, then what the backend's registration checks (`doctor`)."""
    support: dict[str, str | None] = {}
    for spec in backend_registry.backends():
        if not facts.get("tensorflow"):
            support[spec.name] = "TensorFlow is not installed"
        else:
            support[spec.name] = spec.doctor(facts) if spec.doctor is not None else None
    return support


def strategies(tf: Any) -> dict[str, bool]:
    """The tf.distribute strategies the collective and ps backends use, present or not."""
    return {
        "multi_worker_mirrored": hasattr(tf.distribute, "MultiWorkerMirroredStrategy"),
        "parameter_server": hasattr(tf.distribute, "ParameterServerStrategy"),
    }


def describe(support: dict[str, str | None]) -> list[str]:
    """One line per backend: `[X] name` when it can run, `[ ] name: why not` otherwise."""
    return [f"  [X] {name}" if why is None else f"  [ ] {name}: {why}" for name, why in support.items()]
