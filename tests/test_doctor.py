"""`dslrun doctor` reports the real stack and refuses one Horovod cannot work with."""

import json
import os
import subprocess
import sys

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
