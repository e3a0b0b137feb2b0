"""The seeds' transformer jobs on the real node (examples/bert-squad: Lightning FSDP; examples/hub-finetune: DDP +
AMP): the model and dataset staged by index 0's stage init container from the tests' Hub, which the pods reach over
the node's bridge (HF_ENDPOINT on the bridge's gateway), both pods train, and rank 0 exports the model onto the volume.

Each training loop once per engine, not each workload: Lightning (which reads a pod's environment, KUBERNETES_PORT
among it) and the plain loop that finetune and sft share. examples/sft runs here in the image tier's restricted pods
(tests/image), on Slurm (tests/slurm) and under local-job (tests/examples)."""

import importlib
import json
import subprocess

import pytest

from tests.conftest import BIN, ROOT
from tests.realnode.jobs import job, volume, wait_finished
from tests.realnode.node import GATEWAY

pytestmark = [pytest.mark.realnode, pytest.mark.slow]


@pytest.mark.parametrize(("example", "serve", "export", "score"), [
    ("bert-squad", "testbed.qa_data:serve_squad_example", "bert_squad_trained", "f1"),
    ("hub-finetune", "testbed.text_data:serve_imdb_example", "bert_classifier_trained", "accuracy"),
], ids=["qa", "finetune"])
def test_the_seeds_jobs_are_staged_from_a_hub_over_the_bridge_train_and_export(node, worker_image, namespace, example,
                                                                               serve, export, score):
    from testbed.storage_servers import HubServer

    name, workdir = namespace
    hub = HubServer(host=GATEWAY)  # where the pods reach this machine
    try:
        module, function = serve.split(":")
        getattr(importlib.import_module(module), function)(hub)
        claim = volume(node, name, workdir / "volume", example)  # the example's name is its Job's
        here = {"namespace": name, "image": worker_image, "image_pull_policy": "Never",
                "resources": {"cpu": 1, "memory": 4}, "env": [{"name": "HF_ENDPOINT", "value": hub.url}]}
        (workdir / "node.json").write_text(json.dumps(here))
        rendered = subprocess.run(
            [str(BIN / "gen-manifests"), "--values", str(ROOT / "examples" / example / "values.yaml"), "--values",
             str(workdir / "node.json")], capture_output=True, text=True, check=True, timeout=60).stdout
        node.kubectl("apply", "-f", "-", stdin=rendered)
        assert wait_finished(node, name, name=example) == "Complete", job(node, name, example)["status"]
        status = job(node, name, example)["status"]
        assert status.get("failed", 0) == 0, status
        # staged once, by index 0's stage step: each weight and data file fetched from the Hub once
        fetched = [path for path in hub.fetched() if path.endswith((".safetensors", ".parquet", ".json", ".jsonl"))]
        assert hub.fetched(".safetensors") and len(fetched) == len(set(fetched)), fetched
        output = claim / "runs" / example
        summary = json.loads((output / "summary.json").read_text())
        assert summary["world_size"] == 2 and 0 <= summary[score] <= 100, summary
        exported = output / export
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {path.name for path in exported.iterdir()}
        assert (exported / "model.safetensors").stat().st_uid == 10001  # written by the pods' user
    finally:
        hub.close()
