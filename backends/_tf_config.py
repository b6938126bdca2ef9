"""TF_CONFIG, the cluster description every tf.distribute task reads, parsed once for both
cluster backends (ps and collective), which differ only in what they then require of it."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from dsl.language.errors import DslError


def parse_tf_config(environ: Mapping[str, str] | None, when_missing: str, example: str) -> tuple[dict[str, list[str]], str, int]:
    """(cluster without empty jobs, task type, task index); `when_missing` is the error when
    TF_CONFIG is not set, `example` the JSON the error for a malformed one shows."""
    env = os.environ if environ is None else environ
    text = env.get("TF_CONFIG")
    if not text:
        raise DslError(when_missing)
    try:
        config = json.loads(text)
        cluster = {job: list(addresses) for job, addresses in config["cluster"].items() if addresses}
        task_type, task_index = str(config["task"]["type"]), int(config["task"].get("index", 0))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DslError(f"TF_CONFIG is not valid ({exc}): expected JSON like {example}") from None
    return cluster, task_type, task_index
