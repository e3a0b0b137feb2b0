"""python -m bench.gang --quick: real launchers and torchrun, 4 pods of a torch-free program under local-job, one
worker SIGKILLed: the Job completes in place, the fault is accounted for once by the next round's rank 0, and steady
training costs the gang's directory no namespace operation besides the checkpoints' note, as the simulation says."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
@pytest.mark.onecore  # a 2-pod gang that mostly waits out its recovery: 0.47 of a core busy (10 CPU-s in 22 s)
def test_a_real_gang_recovers_in_place_and_its_volume_is_quiet_as_simulated(tmp_path):
    out = tmp_path / "gang.json"
    result = subprocess.run([sys.executable, "-m", "bench.gang", "--quick", "--json", str(out)], capture_output=True,
                            text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    measured = json.loads(out.read_text())
    real, simulated = measured["real"], measured["simulated"]
    assert "complete" in real["outcome"], real["outcome"]
    assert real["steady_namespace_ops"] == 0 and real["checkpoint_note_ops"] > 0, real
    assert real["metadata_ops_per_node_s"] == simulated["metadata_ops_per_node_s"] == 0
    [fault] = real["faults"]
    assert fault["kind"] == "worker failed" and fault["code"] == 137, fault
    assert fault["detect"] < 5 and fault["restart"] < 30, fault  # the round alarm, not a collective's timeout
    assert "| simulated, 4 nodes | worker failed |" in result.stdout
