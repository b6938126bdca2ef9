"""The pipeline language: YAML to a located, checked, resolved pipeline, without TensorFlow.

Loading (file:line:col marks), `extends` / `--set` / `${ENV}` resolution, the JSON Schema and its
located errors, the semantic checks and rules, and the registry of components and backends that the
schema is generated from. Everything here is pure Python so `dslrun validate`, `show` and `schema`
run in CI without TensorFlow; every other folder builds on it, and it imports none of them.
"""
