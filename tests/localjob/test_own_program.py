"""A program that is not ours, with its own directory, arguments, Secrets and volumes, under local-job as the
Job runs it: torchrun's environment, no secret value in any rendered file or log."""

import hashlib
import io
import json
import subprocess
import tarfile
import textwrap

import pytest
import yaml

from testbed.storage_servers import FileServer
from tests.conftest import BIN, OUTSIDE
from trainer_contract import storage

pytestmark = pytest.mark.slow

TOKEN = "s3cr3t-token-value-7f1d"
PASSWORD = "db-passw0rd-0c2e"
CERT = "-----BEGIN CERT-----\ncert-body-91ab\n-----END CERT-----\n"

PROBE = textwrap.dedent('''
    """A user's own program: it reports what it sees, and hashes (never prints) its secrets."""
    import hashlib, json, os, pathlib, sys
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.barrier()
    digest = lambda text: hashlib.sha256(text.encode()).hexdigest()
    report = {
        "rank": os.environ["RANK"], "world_size": os.environ["WORLD_SIZE"],
        "index": os.environ["JOB_COMPLETION_INDEX"], "args": sys.argv[1:], "cwd": os.getcwd(),
        "token": digest(os.environ["API_TOKEN"]), "password": digest(os.environ["DB_PASSWORD"]),
        "note": os.environ["NOTE"],
    }
    creds = pathlib.Path(sys.argv[sys.argv.index("--creds") + 1])
    report["cert"] = digest((creds / "tls.crt").read_text())
    scratch = pathlib.Path(sys.argv[sys.argv.index("--scratch") + 1])
    (scratch / "mine").write_text(os.environ["RANK"])
    out = pathlib.Path(os.environ["OUTPUT_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank-{report['rank']}.json").write_text(json.dumps(report))
    print(f"probe rank {report['rank']}: ok", flush=True)
    dist.destroy_process_group()
''')

VALUES = {
    "name": "probe",
    "entrypoint": {"module": None, "script": "probe.py",
                   "args": ["--greeting", "hello world", "--index", "$(JOB_COMPLETION_INDEX)", "--creds", "/etc/creds",
                            "--scratch", "/scratch"]},
    "working_dir": "/app",
    "config_map": {"NOTE": "free-form for another program"},
    "env": [{"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}}],
    "env_from_secrets": ["db"],
    "extra_volumes": [{"name": "creds", "mount_path": "/etc/creds", "secret": "creds"},
                      {"name": "scratch", "mount_path": "/scratch", "empty_dir": {}}],
    "resources": {"cpu": 1, "memory": 2},
    "shm_size": 0.5,
}


def test_a_program_that_is_not_ours_runs_on_two_pods_with_its_secrets(tmp_path):
    image_dir = tmp_path / "my-training"
    image_dir.mkdir()
    (image_dir / "probe.py").write_text(PROBE)
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(VALUES))
    rendered = subprocess.run([str(BIN / "gen-manifests"), "--values", str(tmp_path / "values.yaml")],
                              capture_output=True, text=True, check=True).stdout
    (tmp_path / "probe.yaml").write_text(rendered)
    # the Secrets, as kubectl create secret generic would read them
    (tmp_path / "api.env").write_text(f"# the API\ntoken={TOKEN}\n")
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "DB_PASSWORD").write_text(PASSWORD)
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "tls.crt").write_text(CERT)
    root = tmp_path / "root"
    result = subprocess.run(
        [str(BIN / "local-job"), str(tmp_path / "probe.yaml"), "--volume-root", str(root), "--status-file",
         str(tmp_path / "status.json"), "--backoff-seconds", "0.2", "--secret", f"api={tmp_path / 'api.env'}",
         "--secret", f"db={tmp_path / 'db'}", "--secret", f"creds={tmp_path / 'creds'}"],
        capture_output=True, text=True, timeout=300, cwd=image_dir)  # started in the program's own directory
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    assert "probe rank 0: ok" in log and "probe rank 1: ok" in log
    output = root / "volumes" / "probe-data" / "runs" / "probe"
    reports = {int(r["rank"]): r for r in (json.loads(p.read_text()) for p in output.glob("rank-*.json"))}
    digest = lambda text: hashlib.sha256(text.encode()).hexdigest()  # noqa: E731
    for rank in (0, 1):
        report = reports[rank]
        assert (report["world_size"], report["index"]) == ("2", str(rank))
        assert report["args"][:4] == ["--greeting", "hello world", "--index", str(rank)]  # one argument each
        assert report["cwd"] == str(image_dir)  # the image's working directory
        assert (report["token"], report["password"], report["cert"]) == (digest(TOKEN), digest(PASSWORD), digest(CERT))
        assert report["note"] == "free-form for another program"
    # no secret value in the rendered manifests, the output, the pods' logs or the status
    written = [rendered, log, (tmp_path / "status.json").read_text()]
    written += [path.read_text(errors="replace") for path in (root / "logs").iterdir()]
    for secret in (TOKEN, PASSWORD, "cert-body-91ab"):
        assert not any(secret in text for text in written)
    # the secret volumes lived only as long as their pods
    assert not list(root.glob("pods/*/secrets/*"))


def test_a_missing_secret_is_refused_by_name(tmp_path):
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(VALUES))
    rendered = subprocess.run([str(BIN / "gen-manifests"), "--values", str(tmp_path / "values.yaml")],
                              capture_output=True, text=True, check=True).stdout
    (tmp_path / "api.env").write_text(f"token={TOKEN}\nnot a pair {TOKEN}\n")
    result = subprocess.run([str(BIN / "local-job"), "--secret", f"api={tmp_path / 'api.env'}"], input=rendered,
                            capture_output=True, text=True, timeout=60, cwd=OUTSIDE)
    assert result.returncode == 2
    assert "--secret api=" in result.stderr and "line 2 is not KEY=VALUE" in result.stderr
    assert TOKEN not in result.stderr + result.stdout
    (tmp_path / "api.env").write_text(f"token={TOKEN}\n")
    result = subprocess.run([str(BIN / "local-job"), "--secret", f"api={tmp_path / 'api.env'}"], input=rendered,
                            capture_output=True, text=True, timeout=60, cwd=OUTSIDE)
    assert result.returncode == 2
    assert "needs Secret db: provide it with --secret db=PATH" in result.stderr
    assert "needs Secret creds" in result.stderr
    assert TOKEN not in result.stderr + result.stdout


READER = textwrap.dedent('''
    """Reads what the stage step staged (DATASET_DIR) and reports it, never the URI it came from."""
    import json, os, pathlib
    data = pathlib.Path(os.environ["DATASET_DIR"])
    out = pathlib.Path(os.environ["OUTPUT_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    report = {"train": (data / "d/train.jsonl").read_text(), "uri_seen": "INDEXED_TRAINER_DATASET_URI" in os.environ}
    (out / f"rank-{os.environ['RANK']}.json").write_text(json.dumps(report))
''')
SIGNATURE = "sig-9d2e7c41b0aa"


def test_a_presigned_url_from_a_secret_is_staged_once_and_written_nowhere(tmp_path):
    """initializer.dataset.storage_uri_secret under local-job, as on a cluster: the URL reaches the stage step
    only (from --secret, as from a Secret), the server sees its signature, index 0 stages it once and index 1
    waits; the signature is in no rendered object, log or status."""
    served = tmp_path / "served"
    served.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        body = b'{"text": "hello"}\n'
        member = tarfile.TarInfo("d/train.jsonl")
        member.size = len(body)
        archive.addfile(member, io.BytesIO(body))
    (served / "data.tar.gz").write_bytes(buffer.getvalue())
    server = FileServer(served)
    server.required_query = ("X-Amz-Signature", SIGNATURE)
    try:
        image_dir = tmp_path / "my-training"
        image_dir.mkdir()
        (image_dir / "reader.py").write_text(READER)
        values = {"name": "presigned", "entrypoint": {"module": None, "script": "reader.py"},
                  "initializer": {"dataset": {"storage_uri": None,
                                              "storage_uri_secret": {"name": "presigned-urls", "key": "data"}}},
                  "resources": {"cpu": 1, "memory": 2}, "shm_size": 0.5}
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
        rendered = subprocess.run([str(BIN / "gen-manifests"), "--values", str(tmp_path / "values.yaml")],
                                  capture_output=True, text=True, check=True).stdout
        (tmp_path / "urls").mkdir()
        (tmp_path / "urls" / "data").write_text(f"{server.url}/data.tar.gz?X-Amz-Expires=600&X-Amz-Signature={SIGNATURE}")
        root = tmp_path / "root"
        result = subprocess.run(
            [str(BIN / "local-job"), "-", "--volume-root", str(root), "--status-file", str(tmp_path / "status.json"),
             "--backoff-seconds", "0.2", "--secret", f"presigned-urls={tmp_path / 'urls'}"],
            input=rendered, capture_output=True, text=True, timeout=300, cwd=image_dir)
        log = result.stdout + result.stderr
        assert result.returncode == 0, log[-5000:]
        volume = root / "volumes" / "presigned-data"
        place = volume / "staged/datasets/secret/presigned-urls/data"
        assert (place / storage.MARKER).is_file()
        for rank in (0, 1):
            report = json.loads((volume / f"runs/presigned/rank-{rank}.json").read_text())
            assert report == {"train": '{"text": "hello"}\n', "uri_seen": False}  # the trainer never gets the URI
        assert server.fetched() == ["/data.tar.gz"]  # once, by index 0, with the signature the server wanted
        # named by its Secret and key, never by its text (not even redacted)
        assert "dataset from Secret presigned-urls key data" in log and "X-Amz-Signature" not in log
        written = [rendered, log, (tmp_path / "status.json").read_text(), (place / storage.MARKER).read_text()]
        written += [path.read_text(errors="replace") for path in (root / "logs").iterdir()]
        assert not any(SIGNATURE in text for text in written)
    finally:
        server.close()
