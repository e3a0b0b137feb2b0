"""Storage URIs in the values (initializer.model / initializer.dataset / export / checkpoint .storage_uri):
parsed once (trainer_contract/storage.py), refused at render time naming the key, rendered as the stager's
variables, MODEL_DIR / DATASET_DIR and a stage step on every target; credentials only from Secrets."""

from __future__ import annotations

import shlex

import pytest
import yaml

from tests.generator.helpers import run_main
from trainer_contract import storage
from trainer_contract.storage import StorageUriError

SHARED = "/pvc-home"


@pytest.mark.parametrize(("text", "role", "describe", "path"), [
    ("hf://google-bert/bert-base-uncased", "model", "google-bert/bert-base-uncased@main",
     "/pvc-home/staged/models/hf/google-bert--bert-base-uncased/main"),
    ("hf://gpt2@v1.0", "model", "gpt2@v1.0", "/pvc-home/staged/models/hf/gpt2/v1.0"),
    ("hf://datasets/rajpurkar/squad@refs/convert/parquet", "dataset", "dataset rajpurkar/squad@refs/convert/parquet",
     "/pvc-home/staged/datasets/hf/rajpurkar--squad/refs%2Fconvert%2Fparquet"),
    ("s3://team-data/squad/v2/", "dataset", "s3://team-data/squad/v2/", "/pvc-home/staged/datasets/s3/team-data%2Fsquad%2Fv2"),
    ("s3://team-data", "model", "s3://team-data", "/pvc-home/staged/models/s3/team-data"),
    ("/pvc-home/models/bert", "model", "/pvc-home/models/bert", "/pvc-home/models/bert"),
])
def test_a_uri_names_its_source_and_where_it_is_staged(text, role, describe, path):
    uri = storage.parse(text, role)
    assert uri.describe == describe
    assert uri.staged_path(SHARED, role) == path


@pytest.mark.parametrize(("first", "second"), [
    ("hf://org/m@v1/x", "hf://org/m@v1_x"),  # were one directory: the second "already staged", the first's files
    ("hf://a--b", "hf://a/b"),
    ("s3://b-1/a", "s3://b-1/a/b"),  # were nested: staging the second moved files inside the first's
    ("s3://b-1", "s3://b-1/a"),
    ("s3://b-1/a%2Fb", "s3://b-1/a/b"),
])
def test_two_sources_never_share_a_directory_nor_nest(first, second):
    one, other = (storage.parse(text, "model").staged_path(SHARED, "model") for text in (first, second))
    assert one != other and not other.startswith(one + "/") and not one.startswith(other + "/")


def test_two_urls_of_the_same_file_name_are_staged_apart_and_archives_are_known():
    first = storage.parse("https://a.example/data/squad.tar.gz", "dataset")
    second = storage.parse("https://b.example/data/squad.tar.gz", "dataset")
    assert first.is_archive and first.staged_path(SHARED, "dataset") != second.staged_path(SHARED, "dataset")
    assert not storage.parse("https://a.example/data/train.json", "dataset").is_archive


@pytest.mark.parametrize(("text", "role", "words"), [
    ("ftp://host/file", "model", "unknown scheme ftp://"),
    ("google-bert/bert-base-uncased", "model", "has no scheme"),
    ("hf://a/b/c", "model", "is not a Hub repository"),
    ("hf://org/name@", "model", "the revision after '@'"),
    ("s3://Bad_Bucket/x", "dataset", "is not a bucket name"),
    ("s3://bucket/a/../b", "dataset", "empty or relative part"),
    ("https://host/", "dataset", "names no file"),
    ("hf://org/name", "export", "exports go to a bucket"),
    ("/pvc-home/out", "checkpoint", "checkpoints go to a bucket"),
    ("/pvc-home/../etc", "model", "not a plain absolute path"),
    (" s3://bucket/x", "model", "spaces around it"),
    ("https://[::1/f", "dataset", "is not a URL (its host or port cannot be read)"),
    ("https://host:99999/f", "dataset", "is not a URL (its host or port cannot be read)"),
    ("https://host/f\nx", "model", "holds a control character"),
    ("s3://bucket/a\tb", "dataset", "holds a control character"),
    ("https://bob:hunter2@host/f.tar.gz", "dataset", "a user or password in the URL"),
    ("https://../f.tar.gz", "dataset", "'..' is not a host name"),
    ("s3://bucket/m.tar.gz?X-Amz-Signature=abc", "model", "an s3:// URI takes no query ('?')"),
    ("s3://bucket/m.tar.gz%3FX-Amz-Signature%3Dabc", "model", "an s3:// URI takes no query ('?')"),
    ("s3://bucket/m.tar.gz%253Fsig%253Dabc", "dataset", "an s3:// URI takes no query ('?')"),
])
def test_a_bad_uri_says_what_is_wrong_and_what_to_write(text, role, words):
    with pytest.raises(StorageUriError, match=words.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.").replace("?", r"\?")):
        storage.parse(text, role)


def test_bad_uris_are_refused_at_render_time_each_naming_its_key():
    result = run_main("--set", "initializer.model.storage_uri=ftp://x/y",
                      "--set", "initializer.dataset.storage_uri=s3://B/x", "--set", "export.storage_uri=hf://a/b")
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert any(line.startswith("gen-manifests: error: initializer.model.storage_uri: 'ftp://x/y': unknown scheme")
               for line in lines)
    assert any(line.startswith("gen-manifests: error: initializer.dataset.storage_uri: 's3://B/x'") for line in lines)
    assert any(line.startswith("gen-manifests: error: export.storage_uri: 'hf://a/b': exports go to a bucket")
               for line in lines)
    assert len(lines) == 3


@pytest.mark.parametrize("sets", [
    ["config_map.HF_TOKEN=hf_abc"],
    ["env=[{name: AWS_SECRET_ACCESS_KEY, value: wJalrXUtnFEMI}]"],
])
def test_a_credential_written_into_the_values_is_refused_and_never_printed(sets):
    result = run_main(*[arg for item in sets for arg in ("--set", item)])
    assert result.exit_code == 2 and result.stdout == ""
    assert "credentials come from a Secret only" in result.stderr
    assert "hf_abc" not in result.stderr and "wJalrXUtnFEMI" not in result.stderr
    assert "not a variable of" not in result.stderr


@pytest.mark.parametrize(("sets", "secret"), [
    (["initializer.model.storage_uri=https://bob:hunter2@h.example/m.tar.gz"], "hunter2"),
    (["initializer.dataset.storage_uri=https://h.example/?X-Amz-Signature=abc123&X-Amz-Credential=AKIA9"], "abc123"),
    (["initializer.dataset.storage_uri=https://[::1/f?token=tok-77"], "tok-77"),
    (["entrypoint.script=train.py", "config_map.AWS_ENDPOINT_URL=http://key:s3cret@127.0.0.1:9000"], "s3cret"),
    (["env=[{name: HF_ENDPOINT, value: 'https://hub.example/?token=hf-tok-9'}]"], "hf-tok-9"),
    # a presigned URL pasted into an s3:// URI, as written or percent-encoded
    (["initializer.model.storage_uri=s3://team-data/m.tar.gz?X-Amz-Signature=sig-4471&X-Amz-Expires=60"], "sig-4471"),
    (["initializer.dataset.storage_uri=s3://team-data/d.tar%3FX-Amz-Signature%3Dsig-4472"], "sig-4472"),
])
def test_a_uri_or_endpoint_that_holds_a_secret_is_refused_without_showing_it(sets, secret):
    result = run_main(*[arg for item in sets for arg in ("--set", item)])
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    assert secret not in result.stderr and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "***" in line]
    assert line.startswith("gen-manifests: error: "), line


@pytest.mark.parametrize(("text", "shown"), [
    ("https://h.example/f.tar.gz", "https://h.example/f.tar.gz"),
    ("https://u:p@h.example/f?X-Amz-Signature=s&a=1#x", "https://***@h.example/f?X-Amz-Signature=***&a=***#x"),
    ("http://tok@h/?", "http://***@h/?"),
    ("s3://bucket/prefix", "s3://bucket/prefix"),
])
def test_redaction_hides_the_user_password_and_query_values(text, shown):
    assert storage.redacted(text) == shown
    assert storage.holds_credentials(text) == (text != shown)


def test_an_unpacking_limit_reaches_the_stage_step_on_both_targets():
    sets = ["--set", "initializer.dataset.storage_uri=https://data.example/squad.tar.gz",
            "--set", "initializer.dataset.max_unpacked_bytes=5000000000"]
    _, config = _job_and_config(*[item for item in sets[1::2]])
    assert config[storage.STAGED["dataset"].unpack_limit] == "5000000000"
    assert storage.STAGED["model"].unpack_limit not in config  # null: not rendered
    script = run_main("--target", "slurm", *sets)
    assert script.exit_code == 0 and "export INDEXED_TRAINER_DATASET_MAX_BYTES=5000000000\n" in script.stdout


def test_hub_patterns_reach_the_stage_step_as_json_on_both_targets():
    sets = ["initializer.model.storage_uri=hf://meta-llama/Llama-3.1-8B-Instruct",
            "initializer.model.ignore_patterns=['original/', \"it's *.bin\"]"]
    _, config = _job_and_config(*sets)
    assert config[storage.STAGED["model"].ignore_patterns] == '["original/", "it\'s *.bin"]'
    assert storage.STAGED["model"].allow_patterns not in config  # null: the stager's default (MODEL_FILES)
    script = run_main("--target", "slurm", *[item for pair in zip(["--set"] * 2, sets, strict=True) for item in pair])
    # quoted for the shell: the stager reads exactly the JSON
    assert script.exit_code == 0
    line = next(line for line in script.stdout.splitlines() if "IGNORE_PATTERNS" in line)
    assert shlex.split(line.removeprefix("export ")) == \
        ['INDEXED_TRAINER_MODEL_IGNORE_PATTERNS=["original/", "it\'s *.bin"]']


@pytest.mark.parametrize("sets, problem", [
    (["initializer.model.storage_uri=s3://team-models/bert", "initializer.model.allow_patterns=['*.json']"],
     "initializer.model.allow_patterns: selects files of an hf:// repository, and the model has storage_uri "
     "s3://team-models/bert: remove it"),
    (["initializer.dataset.ignore_patterns=['*.csv']"],
     "initializer.dataset.ignore_patterns: selects files of an hf:// repository, and the dataset has no storage_uri"),
    (["initializer.model.storage_uri=hf://org/m", "initializer.model.allow_patterns=['']"],
     "initializer.model.allow_patterns[0]"),
])
def test_hub_patterns_without_a_hub_repository_or_empty_are_refused_naming_the_key(sets, problem):
    result = run_main(*[item for one in sets for item in ("--set", one)])
    assert result.exit_code != 0 and result.stdout == "" and problem in result.stderr, result.stderr


def test_a_signing_secret_reaches_the_stage_step_and_the_trainer_and_slurm_asks_for_it():
    sets = ["checkpoint.storage_uri=s3://team-ckpt/run", "env_from_secrets=[s3]",
            "checkpoint.signing_secret={name: ckpt-signing, key: key}"]
    job, config = _job_and_config(*sets)
    pod = job["spec"]["template"]["spec"]
    wanted = {"name": storage.SIGNING_KEY_VARIABLE, "valueFrom": {"secretKeyRef": {"name": "ckpt-signing", "key": "key"}}}
    for container in [*pod["initContainers"], *pod["containers"]]:
        assert wanted in container["env"], container["name"]
    assert storage.SIGNING_KEY_VARIABLE not in config  # never in the ConfigMap
    script = run_main("--target", "slurm", *[arg for item in sets[::2] for arg in ("--set", item)])
    assert script.exit_code == 0, script.stderr
    assert 'if [ -z "${INDEXED_TRAINER_CHECKPOINT_SIGNING_KEY:-}" ]; then' in script.stdout
    alone = run_main("--set", "checkpoint.signing_secret={name: ckpt-signing, key: key}")
    assert alone.exit_code == 2 and alone.stderr.startswith("gen-manifests: error: checkpoint.signing_secret: signs")


def test_a_presigned_urls_signature_never_reaches_a_line():
    uri = storage.parse("https://h.example/d/train.tar.gz?X-Amz-Signature=deadbeef", "dataset")
    assert uri.url.endswith("deadbeef")  # fetched as given
    assert "deadbeef" not in uri.describe and "deadbeef" not in uri.named("dataset")
    assert "deadbeef" not in uri.staged_path(SHARED, "dataset")


@pytest.mark.parametrize(("uri", "named"), [
    ("https://h.example/d/train.tar.gz?X-Amz-Signature=deadbeef&X-Amz-Expires=600",
     "X-Amz-Signature, X-Amz-Expires"),
    ("https://h.example/model.zip?sv=2024&sig=deadbeef", "sig"),
    ("https://h.example/model.zip?access_token=deadbeef", "access_token"),
    ("https://h.example/model.zip?download=1&apiKey=deadbeef", "apiKey"),
])
def test_a_credential_in_a_storage_uri_is_refused_naming_the_key_and_the_secret_way(uri, named):
    result = run_main("--set", f"initializer.model.storage_uri={uri}")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("gen-manifests: error: initializer.model.storage_uri: ")
    assert f"carries a credential in its query ({named})" in result.stderr
    assert "name its key in initializer.model.storage_uri_secret" in result.stderr
    assert "deadbeef" not in result.stderr
    assert run_main("--set", "initializer.model.storage_uri=https://h.example/model.zip?download=1").exit_code == 0


def test_a_uri_from_a_secret_reaches_the_stage_step_alone_and_slurm_asks_for_it():
    secret = "initializer.dataset.storage_uri_secret={name: presigned, key: data-url}"
    job, config = _job_and_config(secret)
    pod = job["spec"]["template"]["spec"]
    wanted = {"name": storage.URI_VARIABLES["dataset"],
              "valueFrom": {"secretKeyRef": {"name": "presigned", "key": "data-url"}}}
    containers = {container["name"]: container for container in [*pod["initContainers"], *pod["containers"]]}
    assert wanted in containers["stage"]["env"]
    assert all(wanted not in containers[name]["env"] for name in ("check-config", "worker"))  # the stage step's only
    assert storage.URI_VARIABLES["dataset"] not in config
    assert config["DATASET_DIR"] == config["DATA_DIR"] == "/pvc-home/staged/datasets/secret/presigned/data-url"
    script = run_main("--target", "slurm", "--set", secret)
    assert script.exit_code == 0, script.stderr
    assert 'if [ -z "${INDEXED_TRAINER_DATASET_URI:-}" ]; then' in script.stdout
    assert 'export DATASET_DIR="$shared_dir/staged/datasets/secret/presigned/data-url"' in script.stdout
    both = run_main("--set", secret, "--set", "initializer.dataset.storage_uri=hf://datasets/org/d")
    assert both.exit_code == 2 and both.stderr == (
        "gen-manifests: error: initializer.dataset.storage_uri_secret: initializer.dataset.storage_uri is set too: "
        "the URI comes from one of them; set the other to null\n")


def test_a_secret_key_of_dots_is_still_one_component_of_its_own():
    assert storage.from_secret("s", "..").staged_path(SHARED, "model") == "/pvc-home/staged/models/secret/s/%2E."
    assert storage.from_secret("s", ".a").staged_path(SHARED, "model") != storage.from_secret(
        "s", "%2Ea").staged_path(SHARED, "model")


def test_a_bucket_needs_credentials_from_a_secret_on_kubernetes_not_on_slurm():
    bucket = ["--set", "initializer.dataset.storage_uri=s3://team-data/mnist"]
    refused = run_main(*bucket)
    assert refused.exit_code == 2
    assert refused.stderr.startswith("gen-manifests: error: initializer.dataset.storage_uri: s3://team-data/mnist "
                                     "needs credentials, and none come from a Secret")
    assert run_main("--target", "local", *bucket).exit_code == 2  # local-job reads Secrets too: --secret
    for fix in (["--set", "env_from_secrets=[s3]"], ["--set", "service_account_name=trainer"],
                ["--set", "env=[{name: AWS_ACCESS_KEY_ID, valueFrom: {secretKeyRef: {name: s3, key: id}}}]"]):
        assert run_main(*bucket, *fix).exit_code == 0, fix
    assert run_main("--target", "slurm", *bucket).exit_code == 0  # Slurm: the environment sbatch runs in


def _job_and_config(*sets: str) -> tuple[dict, dict]:
    result = run_main(*[arg for item in sets for arg in ("--set", item)])
    assert result.exit_code == 0, result.stderr
    documents = {document["kind"]: document for document in yaml.safe_load_all(result.stdout)}
    return documents["Job"], documents["ConfigMap"]["data"]


def test_a_staged_model_and_dataset_give_the_program_their_paths_and_every_pod_a_stage_step():
    job, config = _job_and_config("initializer.model.storage_uri=hf://org/tiny-bert@v2",
                                  "initializer.dataset.storage_uri=https://data.example/squad.tar.gz")
    assert config["MODEL_DIR"] == "/pvc-home/staged/models/hf/org--tiny-bert/v2"
    assert config["DATASET_DIR"].startswith("/pvc-home/staged/datasets/https/data.example/")
    assert config["INDEXED_TRAINER_MODEL_URI"] == "hf://org/tiny-bert@v2"
    init = job["spec"]["template"]["spec"]["initContainers"]
    assert [container["name"] for container in init] == ["check-config", "stage"]
    assert init[1]["command"] == ["python", "-m", "worker.staging"]
    assert {mount["mountPath"] for mount in init[1]["volumeMounts"]} == {"/pvc-home", "/tmp"}


def test_a_path_already_on_the_volume_is_read_where_it_is_and_nothing_is_staged():
    job, config = _job_and_config("initializer.model.storage_uri=/pvc-home/models/bert")
    assert config["MODEL_DIR"] == "/pvc-home/models/bert"
    assert [container["name"] for container in job["spec"]["template"]["spec"]["initContainers"]] == ["check-config"]


def test_nothing_to_stage_renders_no_stage_step_on_either_target():
    job, config = _job_and_config()
    assert not any(key.startswith(("MODEL_DIR", "DATASET_DIR", "INDEXED_TRAINER_")) for key in config
                   if key not in ("INDEXED_TRAINER_METRICS_PORT", "INDEXED_TRAINER_RESTART_IN_PLACE",
                                  "INDEXED_TRAINER_MAX_RESTARTS", "INDEXED_TRAINER_NODE_LEAVES_AFTER",
                                  "INDEXED_TRAINER_WARM_AFTER_SECONDS"))
    assert "worker.staging" not in run_main("--target", "slurm").stdout


def test_slurm_stages_before_training_and_a_staging_failure_ends_there():
    script = run_main("--target", "slurm", "--set", "slurm.shared_dir=/scratch/team",
                      "--set", "initializer.model.storage_uri=hf://org/tiny-bert").stdout
    assert "export MODEL_DIR=\"$shared_dir/staged/models/hf/org--tiny-bert/main\"" in script
    stage = next(line for line in script.splitlines() if "worker.staging" in line)
    assert stage.startswith("srun --ntasks-per-node=1 ") and stage.endswith(" && \\")


def test_a_checkpoint_bucket_runs_the_stager_everywhere_to_restore_onto_an_empty_volume():
    secret = "env_from_secrets=[s3]"
    job, config = _job_and_config("checkpoint.storage_uri=s3://team-ckpt/mnist", secret)
    assert config["INDEXED_TRAINER_CHECKPOINT_URI"] == "s3://team-ckpt/mnist"
    init = job["spec"]["template"]["spec"]["initContainers"]
    assert [container["name"] for container in init] == ["check-config", "stage"]
    script = run_main("--target", "slurm", "--set", "checkpoint.storage_uri=s3://team-ckpt/mnist").stdout
    assert any("worker.staging" in line and line.endswith(" && \\") for line in script.splitlines())
    assert "restores the newest complete one from checkpoint.storage_uri" in script


def test_a_users_program_with_a_checkpoint_bucket_is_told_its_directory_and_restored_on_both_targets():
    """The program writes its checkpoints into INDEXED_TRAINER_CHECKPOINT_DIR (trainer_contract/checkpoint_layout.py's
    convention), which index 0's launcher mirrors (the launcher is indexed-trainer unless set) and the plain stage
    step restores into (the stager finds the directory in the environment: no --program)."""
    sets = ("checkpoint.storage_uri=s3://team-ckpt/own", "env_from_secrets=[s3]", "entrypoint.module=team.train")
    job, config = _job_and_config(*sets)
    assert config["INDEXED_TRAINER_CHECKPOINT_DIR"] == "/pvc-home/runs/mnist-train/checkpoints"
    assert config["INDEXED_TRAINER_CHECKPOINT_URI"] == "s3://team-ckpt/own"
    pod = job["spec"]["template"]["spec"]
    assert [(container["name"], container["command"]) for container in pod["initContainers"]] == [
        ("stage", ["python", "-m", "worker.staging"])]
    assert pod["containers"][0]["command"] == ["python", "-m", "worker.launch"]
    script = run_main("--target", "slurm", "--set", sets[0], "--set", sets[2]).stdout
    assert 'export INDEXED_TRAINER_CHECKPOINT_DIR="$shared_dir/runs/mnist-train/checkpoints"' in script
    assert any(line.endswith(" python -m worker.staging && \\") for line in script.splitlines())
    assert "node 0's launcher mirrors them to the bucket" in script
    # the built-in programs keep theirs where their own variables say: no directory variable for them
    assert "INDEXED_TRAINER_CHECKPOINT_DIR" not in _job_and_config(*sets[:2])[1]


def test_plain_torchrun_with_a_checkpoint_bucket_is_refused_naming_both_keys_and_the_fix():
    result = run_main("--set", "checkpoint.storage_uri=s3://team-ckpt/x", "--set", "env_from_secrets=[s3]",
                      "--set", "entrypoint.module=team.train", "--set", "entrypoint.launcher=torchrun")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "gen-manifests: error: checkpoint.storage_uri: the indexed-trainer launcher mirrors the checkpoints -m "
        "team.train writes into INDEXED_TRAINER_CHECKPOINT_DIR, and entrypoint.launcher is torchrun, which mirrors "
        "nothing: remove entrypoint.launcher (or set indexed-trainer; the image then needs indexed-trainer[staging])\n")


@pytest.mark.parametrize("module", ["worker.qa", "worker.finetune"])
def test_a_workload_with_a_checkpoint_bucket_names_itself_to_the_stage_step_on_both_targets(module):
    """The stager restores a workload's checkpoints by its own settings and naming: the stage command names it (the
    MNIST worker's, above, stays the plain command)."""
    sets = ("checkpoint.storage_uri=s3://team-ckpt/run", "env_from_secrets=[s3]", f"entrypoint.module={module}")
    job, config = _job_and_config(*sets)
    assert config["INDEXED_TRAINER_CHECKPOINT_URI"] == "s3://team-ckpt/run"
    init = job["spec"]["template"]["spec"]["initContainers"]
    assert [container["name"] for container in init] == ["check-config", "stage"]
    assert init[1]["command"] == ["python", "-m", "worker.staging", "--program", module]
    script = run_main("--target", "slurm", "--set", sets[0], "--set", sets[2]).stdout  # Slurm has no Secrets
    stage = next(line for line in script.splitlines() if "worker.staging" in line)
    assert stage.endswith(f" python -m worker.staging --program {module} && \\")
    assert "restores the newest complete one from checkpoint.storage_uri" in script
    staging_only = _job_and_config(f"entrypoint.module={module}", "initializer.model.storage_uri=hf://org/bert")[0]
    assert staging_only["spec"]["template"]["spec"]["initContainers"][1]["command"] == [
        "python", "-m", "worker.staging"]


def test_an_export_inside_a_users_checkpoint_prefix_is_refused_as_the_mirror_would_remove_it():
    """Every name under a user's program's checkpoint prefix is one of its checkpoints to the mirror (which keeps
    what the directory holds); a built-in program's naming never matches an export, so its renders are unchanged."""
    sets = ["--set", "checkpoint.storage_uri=s3://team-ckpt/own", "--set", "env_from_secrets=[s3]"]
    for export in ("s3://team-ckpt/own/model", "s3://team-ckpt/own"):
        refused = run_main(*sets, "--set", f"export.storage_uri={export}", "--set", "entrypoint.script=train.py")
        assert refused.exit_code == 2 and refused.stderr == (
            f"gen-manifests: error: export.storage_uri: {export} is inside checkpoint.storage_uri s3://team-ckpt/own, "
            "where the mirror keeps only what INDEXED_TRAINER_CHECKPOINT_DIR holds (it would remove the export): give "
            "the export a prefix of its own\n")
    for export in ("s3://team-ckpt/owner", "s3://team-models/own"):
        assert run_main(*sets, "--set", f"export.storage_uri={export}", "--set", "entrypoint.script=train.py"
                        ).exit_code == 0
    assert run_main(*sets, "--set", "export.storage_uri=s3://team-ckpt/own/model").exit_code == 0


def test_a_script_is_named_without_its_arguments_when_a_checkpoint_bucket_is_refused():
    result = run_main("--set", "checkpoint.storage_uri=s3://team-ckpt/x", "--set", "env_from_secrets=[s3]",
                      "--set", "entrypoint.script=train.py", "--set", "entrypoint.args=[--epochs, '3']",
                      "--set", "entrypoint.launcher=torchrun")
    assert result.exit_code == 2
    assert "mirrors the checkpoints train.py writes into" in result.stderr


DATASETS = ["entrypoint.module=worker.sft", "env_from_secrets=[s3]",
            "initializer.datasets={chats: {storage_uri: 's3://team-data/chats'}, "
            "public: {storage_uri: 'hf://datasets/org/talk@v1', allow_patterns: ['data/*.parquet']}}",
            "config_map.TRAIN_FILES=chats/*.jsonl,public/data/train-*.parquet", "config_map.TRAIN_WEIGHTS=3,1"]


def test_several_datasets_reach_the_stage_step_in_one_variable_and_the_program_reads_their_directory():
    from trainer_contract import datasets

    job, config = _job_and_config(*DATASETS)
    mixed = datasets.mixed_path(SHARED, {"chats": "s3://team-data/chats", "public": "hf://datasets/org/talk@v1"})
    assert config["DATASET_DIR"] == config["DATA_DIR"] == mixed
    assert [dataset.name for dataset in datasets.parsed(config[datasets.DATASETS_VARIABLE])] == ["chats", "public"]
    assert storage.URI_VARIABLES["dataset"] not in config
    assert [container["name"] for container in job["spec"]["template"]["spec"]["initContainers"]] == \
        ["check-config", "stage"]
    on_slurm = [item for item in DATASETS if not item.startswith("env_from_secrets")]  # sbatch's environment
    script = run_main("--target", "slurm", *[arg for item in on_slurm for arg in ("--set", item)])
    assert script.exit_code == 0 and "worker.staging" in script.stdout, script.stderr
    line = next(line for line in script.stdout.splitlines() if datasets.DATASETS_VARIABLE in line)
    assert shlex.split(line.removeprefix("export ")) == [f"{datasets.DATASETS_VARIABLE}={config[datasets.DATASETS_VARIABLE]}"]


@pytest.mark.parametrize(("sets", "problem"), [
    (["initializer.dataset.storage_uri=s3://team-data/other"],
     "initializer.datasets: stages the datasets in place of initializer.dataset, which has a storage URI too"),
    (["config_map.TRAIN_FILES=null", "config_map.TRAIN_WEIGHTS=null"],
     "config_map.TRAIN_FILES: initializer.datasets stages each dataset into DATASET_DIR/<name> (chats, public)"),
    (["config_map.TRAIN_FILES=chat/*.jsonl,public/*.parquet"],
     "config_map.TRAIN_FILES: 'chat/*.jsonl' starts with 'chat', which is no dataset of initializer.datasets"),
    (["entrypoint.module=worker.qa", "config_map={}"],
     "initializer.datasets: worker.qa reads one dataset (DATASET_DIR or DATA_DIR), and initializer.datasets stages 2"),
    (["initializer.datasets.chats.storage_uri=/pvc-home/chats"],
     "initializer.datasets.chats.storage_uri: /pvc-home/chats is on the shared volume already and is not staged"),
    (["initializer.datasets.chats.allow_patterns=['*.jsonl']"],
     "initializer.datasets.chats.allow_patterns: selects files of an hf:// repository, and chats's storage_uri is "
     "s3://team-data/chats"),
    (["initializer.datasets.chats.storage_uri=https://data.example/c.tar?X-Amz-Signature=abc"],
     "carries a credential in its query (X-Amz-Signature)"),
    (["initializer.datasets.chats.storage_uri=s3://Bad_Bucket/x"], "initializer.datasets.chats.storage_uri: "),
    (["env_from_secrets=[]"], "initializer.datasets.chats.storage_uri: s3://team-data/chats needs credentials"),
    (["network_policy.enabled=true"], "initializer.datasets.chats.storage_uri (s3://team-data/chats) is reached over "
                                      "the network and the NetworkPolicy would block it"),
])
def test_several_datasets_that_cannot_be_staged_or_read_are_refused_naming_the_key(sets, problem):
    result = run_main(*[arg for item in DATASETS + sets for arg in ("--set", item)])
    assert result.exit_code != 0 and result.stdout == "" and problem in result.stderr, result.stderr
    assert "abc" not in result.stderr


def test_a_users_program_reads_several_datasets_under_their_names_as_it_likes():
    _, config = _job_and_config("entrypoint.module=null", "entrypoint.script=train.py", "env_from_secrets=[s3]",
                                "initializer.datasets={a: {storage_uri: 's3://team-data/a'}}")
    assert config["DATASET_DIR"].startswith(f"{SHARED}/staged/datasets/mixed/")
