"""dsl/distributed/scaling.py: what inputter.batch_size and the learning rate become on N replicas (no TensorFlow)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pipeline_support import typed_pipeline

from dsl.distributed.scaling import scaling_for
from dsl.language.errors import DslError
from dsl.language.resolved import Pipeline
from dsl.modelers._optimizers import fill_optimizer


def pipeline(batch: int = 64, optimizer: str | dict[str, Any] = "momentum", **runner: Any) -> Pipeline:
    """A pipeline as the language resolves it: the optimizer's defaults filled."""
    written = {"type": optimizer} if isinstance(optimizer, str) else optimizer
    return typed_pipeline(inputter={"batch_size": batch}, modeler={"optimizer": fill_optimizer(written)}, runner=runner)


def test_default_keeps_the_global_batch_and_the_rate() -> None:
    """Two ranks split the 64 of one process: 32 each, the same rate, the same run."""
    for replicas, per_rank in ((1, 64), (2, 32), (4, 16), (8, 8)):
        scaling = scaling_for(pipeline(), replicas)
        assert (scaling.batch_size, scaling.global_batch_size, scaling.lr_factor) == (per_rank, 64, 1.0)
        assert scaling.lr_scaling == "none" and not scaling.uneven()


def test_a_global_batch_that_does_not_divide_is_floored_and_said() -> None:
    scaling = scaling_for(pipeline(batch=64), 3)
    assert (scaling.batch_size, scaling.global_batch_size, scaling.lr_factor) == (21, 63, 1.0)
    assert scaling.uneven()
    assert "does not divide by 3" in scaling.describe(0.1)


def test_more_replicas_than_examples_in_the_global_batch_is_an_error_naming_the_fix() -> None:
    with pytest.raises(DslError, match=r"inputter.batch_size 2 .* 4 replicas .*batch_scaling: linear"):
        scaling_for(pipeline(batch=2), 4)


@pytest.mark.parametrize(("optimizer", "rule", "factor"), [
    ("momentum", "linear", 4.0), ("sgd", "linear", 4.0), ("nesterov", "linear", 4.0),
    ("adam", "sqrt", 2.0), ("adamw", "sqrt", 2.0), ("rmsprop", "sqrt", 2.0),
])
def test_a_per_rank_batch_scales_the_rate_by_the_optimizer(optimizer: str, rule: str, factor: float) -> None:
    """lr_scaling auto: linear for SGD (Goyal et al.), sqrt for adaptive optimizers."""
    scaling = scaling_for(pipeline(optimizer=optimizer, batch_scaling="linear"), 4)
    assert (scaling.batch_size, scaling.global_batch_size) == (64, 256)
    assert (scaling.lr_scaling, scaling.lr_factor) == (rule, factor)
    assert f"learning rate {0.1 * factor:g} (x{factor:g}, lr_scaling {rule})" in scaling.describe(0.1)


def test_explicit_lr_scaling_follows_the_growth_of_the_global_batch() -> None:
    assert scaling_for(pipeline(batch_scaling="linear", lr_scaling="sqrt"), 2).lr_factor == pytest.approx(math.sqrt(2))
    assert scaling_for(pipeline(batch_scaling="linear", lr_scaling="none"), 2).lr_factor == 1.0
    assert scaling_for(pipeline(optimizer="adam", batch_scaling="linear", lr_scaling="linear"), 2).lr_factor == 2.0
    # The global batch does not grow: an explicit rule has nothing to scale.
    assert scaling_for(pipeline(lr_scaling="linear"), 2).lr_factor == 1.0


def test_one_replica_is_never_scaled() -> None:
    for runner in ({}, {"batch_scaling": "linear"}, {"batch_scaling": "linear", "lr_scaling": "linear"}):
        scaling = scaling_for(pipeline(**runner), 1)
        assert (scaling.batch_size, scaling.lr_factor) == (64, 1.0)


def test_validate_warns_at_an_lr_scaling_the_global_batch_makes_void(tmp_path) -> None:
    """A pipeline written for a per-rank batch (lr_scaling: linear) is told what the default does now."""
    from click.testing import CliRunner

    from dsl.cli import main

    path = tmp_path / "p.yaml"
    path.write_text(
        "version: 1\nname: p\ninputter: {type: synthetic, num_classes: 3, batch_size: 8}\n"
        "network: {type: mlp, hidden_units: [4]}\nmodeler: {type: image_classification}\n"
        "runner:\n  max_epochs: 1\n  lr_scaling: linear\n"
    )
    result = CliRunner().invoke(main, ["validate", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (f"{path}:8:15: warning: runner.lr_scaling: lr_scaling linear has no effect with runner.batch_scaling: "
            "none (the default)") in result.stdout
    result = CliRunner().invoke(main, ["validate", str(path), "--set", "runner.batch_scaling=linear"],
                                catch_exceptions=False)
    assert result.exit_code == 0 and "warning" not in result.stdout


def test_asynchronous_workers_divide_the_rate_by_their_number_unless_turned_off() -> None:
    """N workers updating a parameter server without waiting: each gradient is about N - 1 updates
    stale, and the rate is divided by N; the batch stays one worker's."""
    scaling = scaling_for(pipeline(batch=128), 1, asynchronous_workers=4)
    assert (scaling.batch_size, scaling.lr_factor, scaling.lr_scaling) == (128, 0.25, "staleness")
    assert scaling.describe(0.1) == ("batch 128 per update from 4 asynchronous workers, learning rate 0.025 "
                                     "(x0.25, async_lr_scaling staleness), momentum 0.15 (0.9 - 0.75, async_momentum staleness)")
    kept = scaling_for(pipeline(batch=128, async_lr_scaling="none", async_momentum="none"), 1, asynchronous_workers=4)
    assert kept.lr_factor == 1.0 and kept.describe(0.1).endswith("learning rate 0.1 (x1, async_lr_scaling none)")
    # One worker, or a synchronous backend, is the one-process rate.
    assert scaling_for(pipeline(batch=128), 1, asynchronous_workers=1).lr_factor == 1.0
    assert scaling_for(pipeline(batch=128), 4).lr_factor == 1.0


def test_asynchronous_workers_lower_the_momentum_by_the_momentum_their_asynchrony_adds() -> None:
    """N asynchronous workers act as an implicit momentum of 1 - 1/N (Mitliagkas et al. 2016): the
    optimizer's momentum is lowered by it, to no less than 0; adaptive optimizers' betas are left."""
    def momentum(workers: int, optimizer: dict[str, Any], **runner: Any) -> tuple[float | None, str]:
        scaling = scaling_for(pipeline(32, optimizer, **runner), 1, asynchronous_workers=workers)
        return scaling.momentum, scaling.describe(0.1)

    assert momentum(2, {"type": "momentum", "momentum": 0.9}) == (
        0.4, "batch 32 per update from 2 asynchronous workers, learning rate 0.05 (x0.5, async_lr_scaling staleness), "
             "momentum 0.4 (0.9 - 0.5, async_momentum staleness)")
    assert momentum(4, {"type": "nesterov", "momentum": 0.95})[0] == pytest.approx(0.2)
    assert momentum(8, {"type": "momentum", "momentum": 0.5}) == (
        0.0, "batch 32 per update from 8 asynchronous workers, learning rate 0.0125 (x0.125, async_lr_scaling staleness), "
             "momentum 0 (0.5 - 0.875, at least 0, async_momentum staleness)")
    assert momentum(4, {"type": "momentum"})[0] == pytest.approx(0.15)  # the type's default, 0.9
    assert momentum(4, {"type": "momentum", "momentum": 0.9}, async_momentum="none")[0] is None
    assert momentum(4, {"type": "rmsprop"}) == (None, "batch 32 per update from 4 asynchronous workers, "
                                                      "learning rate 0.025 (x0.25, async_lr_scaling staleness)")  # none to lower
    assert momentum(4, {"type": "sgd"})[0] is None and momentum(4, {"type": "adam"})[0] is None
    # One worker, or a synchronous backend: the momentum as written.
    assert momentum(1, {"type": "momentum", "momentum": 0.9})[0] is None
    assert scaling_for(pipeline(), 4).momentum is None
