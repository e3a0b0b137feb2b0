"""The seeds' DDP + AMP fine-tune (examples/hub-finetune) on the real node: its model and dataset staged by index 0's
stage init container from the tests' Hub, which the pods reach over the node's bridge (HF_ENDPOINT, the bridge's
gateway), both pods train, and rank 0 exports the model onto the volume."""

import json
import subprocess

import pytest

from tests.conftest import BIN, ROOT
from tests.realnode.jobs import job, volume, wait_finished
from tests.realnode.node import GATEWAY

pytestmark = [pytest.mark.realnode, pytest.mark.slow]
NAME = "hub-finetune"  # examples/hub-finetune's


def test_the_seeds_finetune_is_staged_from_a_hub_over_the_bridge_trains_and_exports(node, worker_image, namespace):
    from testbed.storage_servers import HubServer
    from testbed.text_data import serve_imdb_example

    name, workdir = namespace
    hub = HubServer(host=GATEWAY)  # where the pods reach this machine
    try:
        serve_imdb_example(hub)
        claim = volume(node, name, workdir / "volume", NAME)
        here = {"namespace": name, "image": worker_image, "image_pull_policy": "Never",
                "resources": {"cpu": 1, "memory": 4}, "env": [{"name": "HF_ENDPOINT", "value": hub.url}]}
        (workdir / "node.json").write_text(json.dumps(here))
        rendered = subprocess.run(
            [str(BIN / "gen-manifests"), "--values", str(ROOT / "examples" / NAME / "values.yaml"), "--values",
             str(workdir / "node.json")], capture_output=True, text=True, check=True, timeout=60).stdout
        node.kubectl("apply", "-f", "-", stdin=rendered)
        assert wait_finished(node, name, name=NAME) == "Complete", job(node, name, NAME)["status"]
        status = job(node, name, NAME)["status"]
        assert status.get("failed", 0) == 0, status
        # staged once, by index 0's stage step: each file fetched from the Hub once
        fetched = hub.fetched(".safetensors") + hub.fetched(".parquet")
        assert fetched and len(fetched) == len(set(fetched)), fetched
        output = claim / "runs" / NAME
        summary = json.loads((output / "summary.json").read_text())
        assert summary["world_size"] == 2 and 0 <= summary["accuracy"] <= 100, summary
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= \
            {path.name for path in (output / "bert_classifier_trained").iterdir()}
        assert (output / "bert_classifier_trained" / "model.safetensors").stat().st_uid == 10001
    finally:
        hub.close()
