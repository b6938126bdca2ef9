"""Sweeps: a pipeline's `sweep:` section and `dslrun sweep`, an Optuna study whose trials are dslrun runs.

    language.py   the section's JSON Schema fragment (dsl.language.sections adds it to the pipeline's)
    space.py      one parameter's space: what it can produce, how a trial draws from it
    checks.py     `dslrun validate`'s rules for the section (paths, values, metric, slots)
    plan.py       the section read into a `SweepPlan` (defaults, directory, storage)
    trial.py      one trial as a process tree (one process, horovodrun, dslrun launch)
    driver.py     the loop: ask, start, watch the metric, prune, tell; resume, Ctrl-C
    report.py     --status table, best pipeline, plots
    tracking.py   the sweep's MLflow run, parent of its trials' runs (with the mlflow callback)

Nothing here imports TensorFlow; Optuna is imported by the driver and the report only.
"""
