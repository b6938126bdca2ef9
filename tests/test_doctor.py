"""`dslrun doctor` reports the real stack and refuses one Horovod cannot work with."""

import json
import os
import subprocess
import sys
from pathlib import Path

from dsl.commands.doctor import version_problems


def test_doctor_reports_this_stack() -> None:
    result = subprocess.run([sys.executable, "-m", "dsl", "doctor", "--json"], capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=120)
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    assert facts["tensorflow"] == "2.21.0" and facts["keras"].startswith("2.21")
    assert facts["horovod"]["controllers"] == {"MPI": True, "Gloo": True}
    # built by make install against the TensorFlow it runs with, with the project's patch
    assert facts["horovod"]["build"]["tensorflow"] == facts["tensorflow"]
    assert facts["horovod"]["build"]["patch"] == "tools/horovod-0.28.1-tf2.21.patch"
    assert facts["horovod"]["frameworks"]["TensorFlow"] is True
    assert "Open MPI" in facts["mpi"] and facts["mpi4py"]
    assert facts["problems"] == []


def test_keras3_older_tensorflow_or_a_mismatched_tf_keras_is_refused() -> None:
    assert version_problems("2.21.0", "2.21.0") == []
    assert "Keras 3" in version_problems("2.21.0", "3.10.0")[0]
    assert "TF_USE_LEGACY_KERAS=1" in version_problems("2.21.0", "3.10.0")[0]
    assert "TensorFlow 2.15.1" in version_problems("2.15.1", "2.15.0")[0]
    assert "tf-keras must be of TensorFlow's release" in version_problems("2.21.0", "2.19.0")[0]


def test_horovodrun_keeps_its_build_answers_until_the_extension_changes(tmp_path) -> None:
    """tools/horovod-0.28.1-runner.patch: `make install` leaves the Gloo/MPI answers on disk, stamped
    with the extension file; a stamp that no longer fits (a rebuild) is checked again, not believed."""
    import horovod

    package = os.path.dirname(horovod.__file__)
    kept = json.loads(Path(package, "dslrun_checks.json").read_text())
    assert kept["answers"] == {"gloo_built": True, "mpi_built": True}
    assert [os.path.basename(path) for path, _, _ in kept["stamp"]] == [
        name for name in os.listdir(os.path.join(package, "tensorflow")) if name.startswith("mpi_lib")]
    # A copy of the package whose kept answers are wrong and stamped for another file: asked again.
    import shutil

    copy = tmp_path / "horovod"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "dslrun_checks.json").write_text(json.dumps({"stamp": [["/elsewhere/mpi_lib.so", 1, 1]],
                                                         "answers": {"gloo_built": False, "mpi_built": False}}))
    code = "from horovod.common.util import gloo_built; print(gloo_built())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3"}, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.split() == ["True"], result.stderr[-2000:]
    rewritten = json.loads((copy / "dslrun_checks.json").read_text())
    assert rewritten["answers"] == {"gloo_built": True}
    assert rewritten["stamp"][0][0] == str(copy / "tensorflow" / kept["stamp"][0][0].rsplit("/", 1)[1])
