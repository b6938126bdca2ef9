"""`runner.backend: auto` picks Horovod exactly when a distributed launcher started us."""

from backends.horovod import HorovodBackend
from backends.local import LocalBackend
from backends.select import launched_by_distributed_launcher, select_backend


def test_auto_is_local_without_a_launcher() -> None:
    assert isinstance(select_backend({"backend": "auto"}, environ={}), LocalBackend)


def test_auto_is_horovod_under_horovodrun_or_mpirun() -> None:
    for variable in ("HOROVOD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        assert launched_by_distributed_launcher({variable: "2"})
        assert isinstance(select_backend({"backend": "auto"}, environ={variable: "2"}), HorovodBackend)


def test_explicit_backends() -> None:
    assert isinstance(select_backend({"backend": "local"}, environ={"HOROVOD_RANK": "0"}), LocalBackend)
    assert isinstance(select_backend({"backend": "horovod"}, environ={}), HorovodBackend)


def test_lr_scaling_by_world_size() -> None:
    backend = HorovodBackend({"lr_scaling": "linear"})
    backend.placement.world_size = 4
    assert backend.lr_scale() == 4.0
    backend.runner_params["lr_scaling"] = "sqrt"
    assert backend.lr_scale() == 2.0
    backend.runner_params["lr_scaling"] = "none"
    assert backend.lr_scale() == 1.0
