"""Every transformer workload loads safetensors only: a model directory whose weights are a pickle (a Hub
repository or a bucket can hold one) is refused in one line, exit 78, before anything unpickles it."""

import pickle
import subprocess

import pytest

from tests.conftest import BIN, OUTSIDE


class Planted:
    """Unpickled, it runs a command: what a hostile pytorch_model.bin holds."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (subprocess.call, (["touch", str(self.target)],))


DATA = {  # the least each program reads before its model
    "worker.finetune": '{"text": "good", "label": 1}\n{"text": "bad", "label": 0}\n',
    "worker.qa": None,
    "worker.sft": '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n',
}


@pytest.mark.parametrize("program", sorted(DATA))
def test_a_pickled_model_is_refused_before_anything_unpickles_it(program, tmp_path):
    model, data = tmp_path / "model", tmp_path / "data"
    model.mkdir()
    data.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    (model / "pytorch_model.bin").write_bytes(pickle.dumps(Planted(tmp_path / "PWNED")))
    if DATA[program]:
        for split in ("train", "validation"):
            (data / f"{split}.jsonl").write_text(DATA[program])
    result = subprocess.run([str(BIN / "python"), "-m", program], capture_output=True, text=True, timeout=300,
                            cwd=OUTSIDE, env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path),
                                              "MODEL_DIR": str(model), "DATASET_DIR": str(data),
                                              "OUTPUT_DIR": str(tmp_path / "out"), "HF_HUB_OFFLINE": "1"})
    output = result.stdout + result.stderr
    assert result.returncode == 78, output
    assert "has no safetensors weights (a pickled pytorch_model.bin is not loaded" in output
    assert "Traceback" not in output and not (tmp_path / "PWNED").exists()
