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


def test_replicas_in_step() -> None:
    """An allreduce combines every rank's batch in a step; an asynchronous ps cluster one worker's."""
    from backends.ps import ParameterServerBackend

    backend = HorovodBackend({})
    backend.placement.world_size = 4
    assert backend.replicas_in_step() == 4
    assert LocalBackend({}).replicas_in_step() == 1
    assert ParameterServerBackend({"ps": {"mode": "cluster"}}).replicas_in_step() == 1
