"""The `sweep:` section of a pipeline, as a JSON Schema fragment.

A sweep is declared beside (or `extends:` onto) the pipeline it tunes, so the language that
checks the pipeline checks the sweep too: the schema here gives shapes and defaults, and
`dsl.sweep.checks` relates the section to the rest of the pipeline (paths, values, metric).
"""

from __future__ import annotations

from typing import Any

from dsl.language.goals import AUTO_DESCRIPTION

SPACE_TYPES = ("uniform", "log_uniform", "int", "choice")
METHODS = ("tpe", "random", "grid")

# A dotted path as `--set` takes it: names joined by dots, list items as [N].
PATH_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])*$"

_NUMBER = {"type": "number"}

SPACE_SCHEMA: dict[str, Any] = {
    "description": (
        "The values a trial may give this setting: uniform (low..high), log_uniform (low..high, "
        "drawn on a log scale; low > 0), int (low..high in steps of step; log: true for a log "
        "scale), choice (one of values)."
    ),
    "type": "object",
    "properties": {
        "type": {"description": "uniform, log_uniform, int or choice.", "enum": list(SPACE_TYPES)},
        "low": {"description": "Smallest value (uniform, log_uniform, int).", **_NUMBER},
        "high": {"description": "Largest value (uniform, log_uniform, int).", **_NUMBER},
        "step": {"description": "int: distance between values (default 1).", "type": "integer", "minimum": 1},
        "log": {"description": "int: draw on a log scale (low > 0).", "type": "boolean"},
        "values": {"description": "choice: the values to choose from.", "type": "array", "minItems": 1},
    },
    "required": ["type"],
    "additionalProperties": False,
    "allOf": [
        {
            "if": {"properties": {"type": {"enum": ["uniform", "log_uniform", "int"]}}, "required": ["type"]},
            "then": {"required": ["low", "high"]},
        },
        {
            "if": {"properties": {"type": {"const": "choice"}}, "required": ["type"]},
            "then": {"required": ["values"]},
        },
    ],
}

EARLY_STOPPING_SCHEMA: dict[str, Any] = {
    "description": (
        "Stop unpromising trials early, judged by the metric after each val phase: median (below the "
        "median of earlier trials at the same val phase) or asha (asynchronous successive halving); "
        "null: every trial runs to its end."
    ),
    "type": ["object", "null"],
    "properties": {
        "type": {"description": "median or asha.", "enum": ["median", "asha"]},
        "warmup_phases": {
            "description": ("median: val phases a trial runs before it may be stopped; null = a third of a "
                            "trial's val phases (in the first epochs every trial is near chance)."),
            "type": ["integer", "null"], "minimum": 0, "default": None,
        },
        "startup_trials": {
            "description": "median: trials that finish before any is stopped.",
            "type": "integer", "minimum": 0, "default": 2,
        },
        "min_resource": {
            "description": "asha: val phases every trial gets before the first rung.",
            "type": "integer", "minimum": 1, "default": 1,
        },
        "reduction_factor": {
            "description": "asha: 1 in reduction_factor trials goes on at each rung.",
            "type": "integer", "minimum": 2, "default": 3,
        },
    },
    "required": ["type"],
    "additionalProperties": False,
    "default": None,
}

SWEEP_SCHEMA: dict[str, Any] = {
    "description": (
        "A hyper-parameter sweep of this pipeline (`dslrun sweep FILE`): an Optuna study whose trials "
        "are runs of this pipeline with settings drawn from `parameters`, each started the way "
        "runner.backend runs (one process, horovodrun -np ranks_per_trial, dslrun launch). `dslrun run` "
        "ignores it."
    ),
    "type": "object",
    "properties": {
        "parameters": {
            "description": (
                "The settings to tune, keyed by their dotted path as --set writes it "
                "(modeler.optimizer.learning_rate, network.depth, callbacks[1].every_n_iters), each with its space."
            ),
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": PATH_PATTERN},
            "additionalProperties": SPACE_SCHEMA,
        },
        "metric": {
            "description": "The output the sweep optimises, written <phase>/<output> (val/accuracy, val/loss).",
            "type": "string",
            "pattern": "^(train|val)/[A-Za-z0-9_.-]+$",
            "default": "val/loss",
        },
        "goal": {
            "description": f"min or max the metric; auto: {AUTO_DESCRIPTION}.",
            "enum": ["auto", "min", "max"],
            "default": "auto",
        },
        "method": {
            "description": "How trials are drawn: tpe (Optuna's TPE), random, or grid (every combination of choice and int spaces).",
            "enum": list(METHODS),
            "default": "tpe",
        },
        "max_trials": {"description": "Trials in all (finished, pruned or failed).", "type": "integer", "minimum": 1, "default": 20},
        "parallel_trials": {"description": "Trials running at once.", "type": "integer", "minimum": 1, "default": 1},
        "max_failed_trials": {
            "description": "The sweep stops when this many trials have failed (crashed, hung, no metric).",
            "type": "integer", "minimum": 1, "default": 3,
        },
        "ranks_per_trial": {
            "description": (
                "Processes of one trial: 1 runs one process; N > 1 runs horovodrun -np N (runner.backend "
                "auto or horovod) or dslrun launch --workers N (collective, ps)."
            ),
            "type": "integer", "minimum": 1, "default": 1,
        },
        "slots": {
            "description": (
                "Processes this machine may run at once for the sweep; parallel_trials x ranks_per_trial must fit. "
                "null: the host list's slots, or this machine's CPU count when the sweep starts."
            ),
            "type": ["integer", "null"], "minimum": 1, "default": None,
        },
        "hosts": {
            "description": (
                "Hosts the trials run on, as horovodrun -H writes them (host:slots): each trial is started by "
                "horovodrun -H on ranks_per_trial free slots of them (one-rank trials too; runner.backend auto or "
                "horovod); null: this machine."
            ),
            "type": ["array", "null"],
            "items": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]+:[0-9]+$"},
            "minItems": 1,
            "default": None,
        },
        "network_interfaces": {
            "description": (
                "horovodrun trials: the interfaces their ranks talk over, as horovodrun --network-interfaces takes "
                "them (eth0 or eth0,ib0); null: horovodrun tests the hosts' interfaces itself (and caches what it "
                "found in ~/.horovod)."
            ),
            "type": ["string", "null"], "pattern": "^[A-Za-z0-9_.:@-]+(,[A-Za-z0-9_.:@-]+)*$", "default": None,
        },
        "trial_timeout_seconds": {
            "description": "A trial running longer is stopped and marked failed (hung); null: no limit.",
            "type": ["number", "null"], "exclusiveMinimum": 0, "default": None,
        },
        "early_stopping": EARLY_STOPPING_SCHEMA,
        "seed": {"description": "Seed of the sampler; null: a different sweep each time.", "type": ["integer", "null"],
                 "minimum": 0, "default": None},
        "directory": {
            "description": "The sweep directory (study database, one run directory per trial, report); null: runs/<name>-sweep.",
            "type": ["string", "null"], "default": None,
        },
        "storage": {
            "description": (
                "The study's database: null for a SQLite file in the sweep directory, or a SQLAlchemy URL such as "
                "postgresql://user@host/db for a sweep driven from several hosts."
            ),
            "type": ["string", "null"], "default": None,
        },
    },
    "required": ["parameters"],
    "additionalProperties": False,
}
