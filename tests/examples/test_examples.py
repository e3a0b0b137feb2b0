"""examples/, run by local-job exactly as their values files, the README and docs/ say (real torchrun, gloo)."""

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, OUTSIDE, ROOT, ROOT_ALLOWANCE
from tests.localjob.test_local_job_runs import lose_a_pod_when

pytestmark = pytest.mark.slow
EXAMPLES = ROOT / "examples"


def render(tmp_path, example: str):
    """`gen-manifests --values examples/EXAMPLE/values.yaml > EXAMPLE.yaml`"""
    manifests = tmp_path / f"{example}.yaml"
    with manifests.open("w") as out:
        subprocess.run([str(BIN / "gen-manifests"), "--values", str(EXAMPLES / example / "values.yaml")], stdout=out,
                       check=True, cwd=OUTSIDE)
    return manifests


def local_job(tmp_path, example: str) -> list[str]:
    """`local-job EXAMPLE.yaml --image-dir examples/EXAMPLE` (with this test's volume root and status file).

    The controller's own back-off (10 s): a replacement started while the old leader still runs can join the
    old rendezvous and wait out join_timeout_seconds (docs/reliability.md); plain torchrun's survivor may
    take a few seconds to fail on a loaded machine."""
    return [str(BIN / "local-job"), str(render(tmp_path, example)), "--image-dir", str(EXAMPLES / example),
            "--volume-root", str(tmp_path / "root"), "--status-file", str(tmp_path / "status.json"),
            "--backoff-seconds", "10"]


def test_toy_ddp_snapshots_on_the_volume_and_resumes_after_a_killed_pod(tmp_path):
    process = subprocess.Popen(local_job(tmp_path, "toy-ddp"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=OUTSIDE, start_new_session=True)
    # pod 1's node is lost
    log = lose_a_pod_when(process, "Epoch 20 | Training snapshot saved", 240, "toy-ddp-1-", tmp_path / "root")
    resumed = [int(n) for n in re.findall(r"Resuming training from snapshot at Epoch (\d+)", log)]
    assert resumed and min(resumed) >= 20  # the gang came back and went on from the volume's snapshot
    assert "[RANK0] done: 60 epochs" in log and "[RANK1] done: 60 epochs" in log
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["condition"]["type"] == "Complete" and status["restarts"] == {"0": 1, "1": 1}
    snapshot = tmp_path / "root" / "volumes" / "toy-ddp-data" / "toy-ddp" / "snapshot.pt"
    assert snapshot.exists()
    assert_a_rerun_is_a_no_op(tmp_path, "toy-ddp", rf"\[RANK[01]\] already trained: the snapshot {re.escape(str(snapshot))} holds 60 of "
                                                   r"60 epochs; nothing to do")
    assert_clean_removes_the_state(tmp_path, "toy-ddp", snapshot)


def assert_a_rerun_is_a_no_op(tmp_path, example: str, line: str) -> None:
    """The same command again on the finished Job's volume: one clear line per rank (``line``, a pattern; the
    volume's mount path reads as its local directory), nothing redone."""
    result = subprocess.run(local_job(tmp_path, example), capture_output=True, text=True, timeout=300, cwd=OUTSIDE)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    assert "Traceback" not in log and len(re.findall(rf"^\[{example}[-\w]*\] {line}", log, re.M)) == 2, log[-3000:]
    assert json.loads((tmp_path / "status.json").read_text())["condition"]["type"] == "Complete"


def assert_clean_removes_the_state(tmp_path, example: str, kept: "os.PathLike") -> None:
    """`local-job clean` (what clean.sh --local runs) removes what local-job kept, naming it."""
    root = tmp_path / "root"
    result = subprocess.run([str(BIN / "local-job"), "clean", str(tmp_path / f"{example}.yaml"), "--volume-root",
                             str(root)], capture_output=True, text=True, timeout=60, cwd=OUTSIDE)
    assert result.returncode == 0, result.stderr
    assert f"local-job clean: removed {root / 'volumes'} (" in result.stdout
    assert f"local-job clean: removed {root / 'logs'} (" in result.stdout
    assert not os.path.exists(kept) and not root.exists()


def test_lightning_script_runs_unchanged_on_two_pods(tmp_path):
    if importlib.util.find_spec("lightning") is None:
        if os.environ.get("CI"):  # .ci/run installs the lightning extra
            pytest.fail("lightning is not installed (pip install -e '.[worker,lightning,test]')")
        pytest.skip("lightning is not installed (pip install '.[lightning]')")
    result = subprocess.run(local_job(tmp_path, "lightning"), capture_output=True, text=True, timeout=400, cwd=OUTSIDE)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    for rank in (0, 1):
        assert re.search(rf"rank {rank} of 2: 2 epochs, train_loss \d\.\d{{4}}", log), log[-3000:]
    final = tmp_path / "root" / "volumes" / "lightning-ddp-data" / "lightning-ddp" / "final.ckpt"
    assert final.exists()
    assert_a_rerun_is_a_no_op(tmp_path, "lightning", rf"rank [01]: already trained: {re.escape(str(final))} exists; nothing to do")


def test_the_example_values_render_for_a_cluster(tmp_path):
    for example in ("toy-ddp", "lightning"):
        text = render(tmp_path, example).read_text()
        assert '- "torchrun"' in text and "workingDir: \"/app\"" in text
        assert "initContainers:" not in text  # only the built-in worker has a configuration to check


def test_staged_mnist_runs_as_the_readme_writes_it(tmp_path):
    """docs/storage.md's block for examples/staged-mnist/, line by line in a new shell, against moto's S3 at the
    127.0.0.1:9000 the values name: staged, trained, checkpoints mirrored, exported; the second local-job fetches
    and uploads nothing. (The install line is what .ci/run did to this environment.)"""
    from testbed.storage_servers import S3Server, port_is_free
    from tests.test_readme import DOCUMENTATION
    from trainer_contract import storage

    block = re.search(r"after the quick start, with `s3-credentials.env`[^\n]*\n[^\n]*\n\n```sh\n(.*?)```", DOCUMENTATION,
                      re.S).group(1)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    assert lines[0] == ". .venv/bin/activate" and lines[1].startswith("scripts/install.sh .venv/bin/python")
    assert port_is_free(9000), "127.0.0.1:9000 is taken: this test serves the example's S3 there"
    s3 = S3Server(port=9000)
    try:
        client = s3.with_mnist("team-checkpoints", "team-models")
        (tmp_path / "s3-credentials.env").write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n")
        (tmp_path / "examples").symlink_to(EXAMPLES)
        env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path),  # a new shell, .venv active
               **ROOT_ALLOWANCE,
               "XDG_STATE_HOME": str(tmp_path / "state")}
        outputs = []
        for line in lines[2:]:
            result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                    timeout=600)
            assert result.returncode == 0, f"{line}: {result.stdout[-3000:]}{result.stderr[-2000:]}"
            outputs.append(result.stdout)
        first, again = outputs[1], outputs[2]
        assert "stage: dataset s3://team-data/mnist staged at" in first
        assert "checkpoint mirror: uploaded 1 file" in first and "launcher: uploaded 4 files" in first
        checkpoints = client.list_objects_v2(Bucket="team-checkpoints", Prefix="mnist/")["Contents"]
        assert f"mnist/ckpt-e0002-s000000.pt/{storage.COMPLETE_OBJECT}" in {item["Key"] for item in checkpoints}
        assert client.get_object(Bucket="team-models", Key=f"mnist/run-1/{storage.COMPLETE_OBJECT}")
        assert "is already staged at" in again and "already holds these 4 files: nothing uploaded" in again
        assert "uploaded 1 file" not in again
    finally:
        s3.close()


def test_own_checkpoints_reach_the_bucket_and_a_new_volume_resumes_from_them(tmp_path):
    """examples/own-checkpoints/ (a user's torchrun program, nothing of ours in it) by docs/storage.md's two lines, against
    moto's S3 at the 127.0.0.1:9000 the values name (each local-job given its own volume root): the first cluster is
    lost at step 25 (FAIL_AT_STEP: every rank exits 78, the Job fails at once) after index 0's launcher mirrored step
    20; the second, on an empty volume, has step 20 restored into INDEXED_TRAINER_CHECKPOINT_DIR by the stage step,
    resumes from it and finishes, its newest checkpoint in the bucket and what its volume pruned gone from there."""
    from testbed.storage_servers import S3Server, port_is_free
    from tests.test_readme import DOCUMENTATION
    from trainer_contract import storage

    block = re.search(r"like staged-mnist, in the same shell:\n\n```sh\n(.*?)```", DOCUMENTATION, re.S).group(1)
    render, local_job = block.strip().splitlines()
    assert port_is_free(9000), "127.0.0.1:9000 is taken: this test serves the example's S3 there"
    s3 = S3Server(port=9000)
    try:
        client = s3.client()
        client.create_bucket(Bucket="team-checkpoints")
        (tmp_path / "s3-credentials.env").write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n")
        (tmp_path / "examples").symlink_to(EXAMPLES)
        env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path),  # a new shell, .venv active
               **ROOT_ALLOWANCE}
        subprocess.run(["bash", "-c", render], cwd=tmp_path, env=env, check=True, timeout=120)

        def run(root: str, *extra: str) -> tuple[int, str]:
            line = f"{local_job} --volume-root {tmp_path / root} --backoff-seconds 1 {' '.join(extra)}"
            result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                    timeout=300)
            return result.returncode, result.stdout + result.stderr

        def directory(root: str) -> Path:
            return tmp_path / root / "volumes/own-checkpoints-data/runs/own-checkpoints/checkpoints"

        code, log = run("first", "--env=FAIL_AT_STEP=25")
        assert code != 0 and "[rank 0] FAIL_AT_STEP=25: exiting 78" in log, log[-4000:]
        assert re.search(r"^\[own-checkpoints-0-\w{5}\] launcher: checkpoint mirror: uploaded 1 file \(.* MB\) to "
                         r"s3://team-checkpoints/own-checkpoints/step-00000020\.pt$", log, re.M), log[-4000:]
        mirrored = client.get_object(Bucket="team-checkpoints", Key="own-checkpoints/step-00000020.pt/step-00000020.pt")
        assert mirrored["Body"].read() == (directory("first") / "step-00000020.pt").read_bytes()

        code, log = run("second")
        assert code == 0, log[-4000:]
        assert re.search(r"^\[own-checkpoints-0-\w{5}/stage\] stage: checkpoint step-00000020\.pt restored from "
                         r"s3://team-checkpoints/own-checkpoints into .*/runs/own-checkpoints/checkpoints \(", log, re.M)
        assert re.search(r"^\[own-checkpoints-1-\w{5}/stage\] stage: index 0 decided: checkpoint step-00000020", log, re.M)
        for rank in (0, 1):
            assert re.search(rf"\[rank {rank}\] resuming from step-00000020\.pt in .*/checkpoints: step 20$", log, re.M)
            assert f"[rank {rank}] done: 40 steps" in log
        assert sorted(path.name for path in directory("second").iterdir()) == ["step-00000030.pt", "step-00000040.pt"]
        keys = {item["Key"] for item in client.list_objects_v2(Bucket="team-checkpoints")["Contents"]}
        assert f"own-checkpoints/step-00000040.pt/{storage.COMPLETE_OBJECT}" in keys
        assert {key.split("/")[1] for key in keys} <= {"step-00000030.pt", "step-00000040.pt"}  # step 20: pruned
        assert "testing" not in log.replace("s3://", "")  # the Secret's values are never printed
    finally:
        s3.close()


def run_readme_block(tmp_path, stages: str, serve) -> tuple[list[str], Path]:
    """docs/workloads.md's block that follows the sentence naming ``stages``, line by line in a new shell, with the tests'
    Hub (``serve(hub)`` fills it) as the mirror the page says to give local-job (--env HF_ENDPOINT=...): each
    command's output, and the XDG state folder local-job keeps its volume in."""
    from testbed.storage_servers import HubServer
    from tests.test_readme import DOCUMENTATION

    block = re.search(rf"stages `{re.escape(stages)}`[^\n]*\n\n```sh\n(.*?)```", DOCUMENTATION, re.S).group(1)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    assert lines[0] == ". .venv/bin/activate" and lines[1].startswith("scripts/install.sh .venv/bin/python")
    hub = HubServer()
    try:
        serve(hub)
        (tmp_path / "examples").symlink_to(EXAMPLES)
        env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path), **ROOT_ALLOWANCE,
               "XDG_STATE_HOME": str(tmp_path / "state")}
        outputs = []
        for line in lines[2:]:
            if line.startswith("local-job "):
                line += f" --env HF_ENDPOINT={hub.url}"
            result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                    timeout=600)
            assert result.returncode == 0, f"{line}: {result.stdout[-3000:]}{result.stderr[-2000:]}"
            outputs.append(result.stdout)
        return outputs, tmp_path / "state"
    finally:
        hub.close()


def test_bert_squad_runs_as_the_readme_writes_it(tmp_path):
    """examples/bert-squad/ as docs/workloads.md writes it: both repositories staged once, two pods train with FSDP in
    bf16, evaluate and export with save_pretrained; the export loads with from_pretrained."""
    transformers = pytest.importorskip("transformers")
    from testbed.qa_data import serve_squad_example

    outputs, state = run_readme_block(tmp_path, "google-bert/bert-base-uncased", serve_squad_example)
    log = outputs[1]
    assert re.search(r"^\[bert-squad-0-\w{5}/stage\] stage: model google-bert/bert-base-uncased@main staged at ",
                     log, re.M), log[-3000:]
    assert re.search(r"^\[bert-squad-0-\w{5}/stage\] stage: dataset rajpurkar/squad@main staged at ", log, re.M)
    assert re.search(r"^\[bert-squad-0-\w{5}/check-config\] worker.qa: configuration is valid", log, re.M)
    assert re.search(r"^\[bert-squad-0-\w{5}\] Rank 0: epoch 1, evaluation: exact match \d+\.\d\d, F1 ", log, re.M)
    output = next(state.rglob("runs/bert-squad"))
    summary = json.loads((output / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["config"]["max_seq_length"] == 256
    exported = transformers.AutoModelForQuestionAnswering.from_pretrained(output / "bert_squad_trained")
    assert exported.config.model_type == "bert"
    assert len(json.loads((output / "predictions.json").read_text())) == 64
    assert "#SBATCH --output=logs/%x-%j.out" in (tmp_path / "bert-squad.sbatch").read_text()


def test_hub_finetune_runs_as_the_readme_writes_it(tmp_path):
    """examples/hub-finetune/ as docs/workloads.md writes it: config.yaml's hyper-parameters in the rendered ConfigMap,
    the model and IMDB's parquet staged once, two pods train with DDP and bf16 autocast on the train split,
    evaluate on the test split (the unlabelled split left alone) and export with save_pretrained."""
    transformers = pytest.importorskip("transformers")
    from testbed.text_data import serve_imdb_example

    outputs, state = run_readme_block(tmp_path, "distilbert/distilbert-base-uncased", serve_imdb_example)
    rendered = (tmp_path / "hub-finetune.yaml").read_text()
    assert '"BATCH_SIZE": "16"' in rendered and '"PRECISION": "bf16"' in rendered and '"WARMUP_STEPS": "10"' in rendered
    log = outputs[1]
    assert re.search(r"^\[hub-finetune-0-\w{5}/stage\] stage: dataset stanfordnlp/imdb@main staged at ", log, re.M)
    assert re.search(r"^\[hub-finetune-0-\w{5}/check-config\] worker.finetune: configuration is valid", log, re.M)
    assert re.search(r"^\[hub-finetune-0-\w{5}\] Rank 0: 256 training texts \(\d+ tokens\), 64 test texts, 2 classes",
                     log, re.M), log[-3000:]
    assert re.search(r"^\[hub-finetune-1-\w{5}\] Rank 1: epoch 1/1, step 8/8, loss ", log, re.M), log[-3000:]
    output = next(state.rglob("runs/hub-finetune"))
    summary = json.loads((output / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["config"]["batch_size"] == 16 and 0 <= summary["accuracy"] <= 100
    exported = transformers.AutoModelForSequenceClassification.from_pretrained(output / "bert_classifier_trained")
    assert exported.config.num_labels == 2
    assert "#SBATCH --output=logs/%x-%j.out" in (tmp_path / "hub-finetune.sbatch").read_text()


def test_sft_runs_as_the_readme_writes_it(tmp_path):
    """examples/sft/ as docs/workloads.md writes it: config.yaml's hyper-parameters in the rendered ConfigMap, the model
    and the conversations staged once, two pods fine-tune LoRA adapters on the assistant turns, evaluate on the
    test split, and export the adapter and the merged model, which load as users load them."""
    pytest.importorskip("peft")
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from testbed.sft_data import serve_capybara_example

    outputs, state = run_readme_block(tmp_path, "Qwen/Qwen2.5-0.5B-Instruct", serve_capybara_example)
    rendered = (tmp_path / "sft.yaml").read_text()
    assert '"LORA_RANK": "16"' in rendered and '"PRECISION": "bf16"' in rendered and '"EXPORT_MERGED": "true"' in rendered
    log = outputs[1]
    assert re.search(r"^\[sft-0-\w{5}/stage\] stage: dataset trl-lib/Capybara@main staged at ", log, re.M), log[-3000:]
    assert re.search(r"^\[sft-0-\w{5}/check-config\] worker.sft: configuration is valid", log, re.M)
    assert re.search(r"^\[sft-0-\w{5}\] Rank 0: 64 training examples \(\d+ supervised tokens\), 16 test examples",
                     log, re.M), log[-3000:]
    assert re.search(r"^\[sft-0-\w{5}\] Rank 0: sample: 'What is the capital of France\?' -> ", log, re.M)
    output = next(state.rglob("runs/sft"))
    summary = json.loads((output / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["step"] == 8  # 64 conversations, 2 ranks of 4 per step
    export = output / "llama_sft_trained"
    staged = next(path.parent for path in state.rglob("model.safetensors") if "runs" not in path.parts)
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(staged), export / "adapter")
        merged = AutoModelForCausalLM.from_pretrained(export / "merged")
        assert torch.allclose(adapter.eval()(input_ids=ids).logits, merged.eval()(input_ids=ids).logits, atol=1e-4)
    assert "#SBATCH --output=logs/%x-%j.out" in (tmp_path / "sft.sbatch").read_text()
