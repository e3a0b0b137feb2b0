"""python -m worker.sft under torchrun (2 processes, gloo) on a tiny random Llama and learnable chat data made on
the spot (testbed/sft_data.py): it learns, it exports what users load, a killed run resumes bit-identical, and a
resume with other data or another LoRA shape is refused naming each."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.sft_data import make_chat_data, make_model
from tests.mnist.launch import fault_env, run_workload, run_workload_on_nodes

pytestmark = pytest.mark.slow
pytest.importorskip("peft")

SETTINGS = {"EPOCHS": "4", "BATCH_SIZE": "8", "LEARNING_RATE": "0.01", "LORA_RANK": "8", "LORA_ALPHA": "16",
            "MAX_SEQ_LENGTH": "64", "LOG_INTERVAL": "4", "CHECKPOINT_EVERY_STEPS": "5", "TENSORBOARD": "false",
            "OMP_NUM_THREADS": "1", "SAMPLE_PROMPTS": "hello, what colour is the sky?"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    return make_model(root / "model"), make_chat_data(root / "data")


def run_sft(model, data, output, extra=None, timeout=300) -> subprocess.CompletedProcess:
    return run_workload("worker.sft", SETTINGS, model, data, output, extra, timeout)


@pytest.fixture(scope="module")
def uninterrupted_run(world, tmp_path_factory):
    """A whole run under ddp, exporting the merged model too (EXPORT_MERGED acts after the training alone), its
    output directory and its result: what a resumed run and another strategy are held to, and what test_it_learns
    checks (one run, not two of the same)."""
    output = tmp_path_factory.mktemp("whole")
    result = run_sft(*world, output, {"EXPORT_MERGED": "true"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return output, result


@pytest.fixture(scope="module")
def uninterrupted(uninterrupted_run):
    """The whole run's output directory."""
    return uninterrupted_run[0]


def staged_copy(model: Path, copy: Path) -> Path:
    """A copy of ``model`` with the stager's marker naming each file's size and SHA-256 (as staging writes it)."""
    from trainer_contract.digests import file_digest
    from trainer_contract.storage import MARKER

    shutil.copytree(model, copy)
    files = {path.name: {"bytes": path.stat().st_size, "sha256": file_digest(path)} for path in copy.iterdir()}
    (copy / MARKER).write_text(json.dumps({"files": files}))
    return copy


ADAPTER = "llama_sft_trained/adapter/adapter_model.safetensors"


def adapter_of(output):
    from safetensors.torch import load_file

    return load_file(output / ADAPTER)


def evaluations(output) -> list[float]:
    lines = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return [line["loss"] for line in lines if "perplexity" in line]


def test_it_learns_and_exports_the_adapter_and_the_merged_model(world, uninterrupted_run, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model, data = world
    out, result = uninterrupted_run  # the module's whole run, EXPORT_MERGED=true: read here, never written to
    untrained = run_sft(model, data, tmp_path / "untrained", {"EPOCHS": "1", "LEARNING_RATE": "1e-9"})
    assert untrained.returncode == 0, untrained.stderr[-3000:]
    losses = evaluations(out)
    assert len(losses) == 4 and losses[-1] < 0.5 * evaluations(tmp_path / "untrained")[0]
    assert "Rank 0: sample: 'hello, what colour is the sky?' -> " in result.stdout
    export = out / "llama_sft_trained"
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model), export / "adapter")
        merged = AutoModelForCausalLM.from_pretrained(export / "merged")
        assert torch.allclose(adapter.eval()(input_ids=ids).logits, merged.eval()(input_ids=ids).logits, atol=1e-4)


def test_chat_template_path_trains_on_its_rendering_and_the_export_keeps_it(world, tmp_path):
    """CHAT_TEMPLATE_PATH as a pod gets it: the conversations are rendered with that template, whose shape the
    run reads, and the exported tokenizer carries it; a resume with another path is refused."""
    from transformers import AutoTokenizer

    model, data = world
    template = ("{% for message in messages %}### {{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}### assistant\n{% endif %}")
    (tmp_path / "plain.jinja").write_text(template)
    short = {"EPOCHS": "1", "TRAIN_SAMPLES": "16", "EVAL_SAMPLES": "8", "SAMPLE_PROMPTS": "",
             "CHAT_TEMPLATE_PATH": str(tmp_path / "plain.jinja")}
    result = run_sft(model, data, tmp_path / "out", short)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    exported = AutoTokenizer.from_pretrained(tmp_path / "out" / "llama_sft_trained" / "adapter")
    assert exported.chat_template == template
    (tmp_path / "other.jinja").write_text(template.replace("### ", "## "))
    again = run_sft(model, data, tmp_path / "out", {**short, "CHAT_TEMPLATE_PATH": str(tmp_path / "other.jinja")})
    # the finished run: its launcher refuses before any rendezvous, naming the variable
    assert again.returncode == 78 and f"CHAT_TEMPLATE_PATH: the finished run in {tmp_path / 'out'} was trained with " \
        f"CHAT_TEMPLATE_PATH={tmp_path / 'plain.jinja'}, now {tmp_path / 'other.jinja'}" in again.stderr, \
        again.stderr[-3000:]


def test_train_files_name_the_data_and_a_fraction_is_held_out_where_no_file_holds_an_evaluation_split(world,
                                                                                                        tmp_path):
    """Data as users have it: the conversations under their own names and no validation split. TRAIN_FILES names
    them, EVAL_FRACTION of the rows evaluate (the log says which), and a resume with another fraction is refused
    (its training rows would differ); with EVAL_FRACTION=0 the run refuses to start, naming the ways out. A second
    dataset mixes in by TRAIN_WEIGHTS."""
    model, data = world
    mine = tmp_path / "mine"
    (mine / "conversations").mkdir(parents=True)
    (mine / "conversations" / "part-0.jsonl").write_text((data / "train.jsonl").read_text())
    short = {"EPOCHS": "1", "TRAIN_SAMPLES": "16", "SAMPLE_PROMPTS": "", "TRAIN_FILES": "conversations/*.jsonl",
             "EVAL_FRACTION": "0.25"}
    result = run_sft(model, mine, tmp_path / "out", short)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert ("16 training examples (" in result.stdout and " supervised tokens), 24 held-out examples, from "
            f"{mine} (evaluation: 0.25 of TRAIN_FILES' files (conversations/part-0.jsonl) held out (EVAL_FRACTION; "
            "SEED chose the rows)); LoRA rank 8" in result.stdout), result.stdout[-3000:]
    assert len(evaluations(tmp_path / "out")) == 1
    again = run_sft(model, mine, tmp_path / "out", {**short, "EVAL_FRACTION": "0.5"})
    assert again.returncode == 78 and "was trained with EVAL_FRACTION=0.25, now 0.5" in again.stderr, \
        again.stderr[-3000:]
    refused = run_sft(model, mine, tmp_path / "refused", {**short, "EVAL_FRACTION": "0"})
    assert refused.returncode == 69 and f"DATASET_DIR: {mine} has no validation or test split to evaluate on: add " \
        "one (validation.jsonl), name its files with EVAL_FILES" in refused.stdout, refused.stdout[-3000:]
    assert not (tmp_path / "refused" / "metrics.jsonl").exists()
    # a second dataset mixed in at three times the weight: the start line says each one's share
    (mine / "more").mkdir()
    (mine / "more" / "part-0.jsonl").write_text((data / "validation.jsonl").read_text())
    mixed = run_sft(model, mine, tmp_path / "mixed", {**short, "TRAIN_FILES": "conversations/*.jsonl,more/*.jsonl",
                                                       "TRAIN_WEIGHTS": "1,3", "TRAIN_SAMPLES": "0", "EVAL_FRACTION": "0.1"})
    assert mixed.returncode == 0, mixed.stdout[-3000:] + mixed.stderr[-3000:]
    assert re.search(r"Rank 0: 100 training examples \(\d+ supervised tokens\), 12 held-out examples, from \S+ \("
                     r"training: TRAIN_FILES' datasets mixed by TRAIN_WEIGHTS: conversations/\*\.jsonl x1 \(25 rows "
                     r"of 86\), more/\*\.jsonl x3 \(75 rows of 14\); evaluation: 0\.1 of each of TRAIN_FILES' "
                     r"datasets held out", mixed.stdout), mixed.stdout[-3000:]


def test_a_killed_run_resumes_at_its_checkpoint_and_ends_bit_identical(world, uninterrupted, tmp_path):
    model, data = world
    fault = fault_env("sigkill@batch=2.5,rank=1,attempt=0")  # after the checkpoint of step 10 (6 steps an epoch)
    killed = run_sft(model, data, tmp_path / "killed", fault)
    assert killed.returncode != 0
    # the data tokenized once, by rank 0, into the token cache; the resumed run reads it there
    assert re.findall(r"Rank (\d): tokenized (\d+) training and \d+ evaluation examples", killed.stdout) == [
        ("0", "96")], killed.stdout[-3000:]
    assert "Rank 0: 96 training examples (" in killed.stdout
    resumed = run_sft(model, data, tmp_path / "killed", fault)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Rank 0: resuming from step-00000010.ckpt" in resumed.stdout
    assert not re.search(r"tokenized \d+ training", resumed.stdout)
    assert "Rank 0: the tokenized data is read from " in resumed.stdout
    expected, got = adapter_of(uninterrupted), adapter_of(tmp_path / "killed")
    assert expected.keys() == got.keys() and all((expected[key] == got[key]).all() for key in expected)


def test_under_fsdp_with_activation_checkpointing_it_trains_as_ddp_does_and_resumes_across_strategies(
        world, uninterrupted, tmp_path):
    """FSDP2 (a shard per decoder block) with recomputed activations makes the updates ddp makes, up to the order
    of float sums; its checkpoint (the adapters whole, by name) resumes under ddp, and the export gathers the
    shards into the pretrained model."""
    import torch

    model, data = world
    fsdp = {"STRATEGY": "fsdp", "ACTIVATION_CHECKPOINTING": "true"}
    fault = fault_env("sigkill@batch=2.5,rank=1,attempt=0")
    killed = run_sft(model, data, tmp_path / "out", {**fsdp, **fault})
    assert killed.returncode != 0
    assert ("under fsdp, the weights read by rank 0 alone (each other rank gets its shard), activations "
            "recomputed") in killed.stdout
    resumed = run_sft(model, data, tmp_path / "out", fault)  # under ddp
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Rank 0: resuming from step-00000010.ckpt" in resumed.stdout
    whole = run_sft(model, data, tmp_path / "fsdp", fsdp)
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    assert "Rank 0: sample: 'hello, what colour is the sky?' -> " in whole.stdout
    expected = adapter_of(uninterrupted)
    for output in (tmp_path / "out", tmp_path / "fsdp"):
        got = adapter_of(output)
        assert got.keys() == expected.keys()
        assert all(torch.allclose(got[key], expected[key], atol=1e-4) for key in expected), output
    assert evaluations(tmp_path / "fsdp") == pytest.approx(evaluations(uninterrupted), rel=1e-3)


def test_hsdp_on_two_nodes_shards_within_each_and_trains_as_ddp_does_on_the_same_ranks(world, tmp_path):
    """STRATEGY=hsdp on 2 launchers ("nodes") of 2 processes, as two pods start them: the adapters sharded within a
    node and replicated across, the same updates as ddp on the 4 ranks (up to the order of float sums), the
    checkpoint and the export gathered whole."""
    import torch

    model, data = world
    short = {"EPOCHS": "1", "TRAIN_SAMPLES": "16", "EVAL_SAMPLES": "8", "BATCH_SIZE": "2", "SAMPLE_PROMPTS": "",
             "CHECKPOINT_EVERY_STEPS": "0"}
    nodes = run_workload_on_nodes("worker.sft", SETTINGS, model, data, tmp_path / "hsdp", {**short, "STRATEGY": "hsdp"})
    for node in nodes:
        assert node.returncode == 0, node.stdout[-3000:] + node.stderr[-3000:]
    assert "under hsdp" in nodes[0].stdout and "4 processes" in nodes[0].stdout
    ddp = run_workload("worker.sft", SETTINGS, model, data, tmp_path / "ddp", short, processes=4)
    assert ddp.returncode == 0, ddp.stdout[-3000:] + ddp.stderr[-3000:]
    expected, got = adapter_of(tmp_path / "ddp"), adapter_of(tmp_path / "hsdp")
    assert got.keys() == expected.keys()
    assert all(torch.allclose(got[key], expected[key], atol=1e-5) for key in expected)
    assert any(float(got[key].abs().sum()) > 0 for key in got if "lora_B" in key)  # it trained (B starts at 0)
    assert (tmp_path / "hsdp" / "checkpoints" / "step-00000002.ckpt").is_file()


def test_a_resume_with_other_data_or_another_lora_shape_is_refused_naming_each(world, tmp_path):
    model, data = world
    first = run_sft(model, data, tmp_path / "out", {"EPOCHS": "1"})
    assert first.returncode == 0, first.stderr[-3000:]
    other = make_chat_data(tmp_path / "other", seed=1)
    finished = run_sft(model, other, tmp_path / "out", {"EPOCHS": "1", "LORA_RANK": "4"})
    assert finished.returncode == 78, finished.stderr[-3000:]  # its launcher's refusal, before any rendezvous
    assert f"DATASET_DIR: the finished run in {tmp_path / 'out'} was trained on other data" in finished.stderr
    assert "LORA_RANK: " in finished.stderr
    (tmp_path / "out" / "summary.json").unlink()  # killed after its last checkpoint: the program's own refusal
    again = run_sft(model, other, tmp_path / "out", {"EPOCHS": "1", "LORA_RANK": "4"})
    assert again.returncode == 78, again.stdout[-3000:]
    assert "DATASET_DIR: checkpoint step-00000006.ckpt was trained on other data" in again.stdout
    assert "LORA_RANK: " in again.stdout


def test_gradient_accumulation_under_fsdp_learns_as_the_larger_batch_does(world, tmp_path):
    """GRADIENT_ACCUMULATION_STEPS=2 of BATCH_SIZE 4 under FSDP2 (the first batch's gradients kept unsharded, no
    reduce-scatter until the second's) makes BATCH_SIZE 8's steps: each batch's loss weighted by its share of the
    step's supervised tokens, as transformers counts them, so the step's loss is the same mean over them."""
    import torch

    model, data = world
    exact = {"STRATEGY": "fsdp", "EPOCHS": "1", "LOG_INTERVAL": "1", "CHECKPOINT_EVERY_STEPS": "0"}
    losses = {}
    for name, batch, accumulation in (("larger", "8", "1"), ("accumulated", "4", "2")):
        result = run_sft(model, data, tmp_path / name,
                         {**exact, "BATCH_SIZE": batch, "GRADIENT_ACCUMULATION_STEPS": accumulation})
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        lines = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        losses[name] = [(line["step"], line["loss"]) for line in lines if "loss" in line and "step" in line
                        and "perplexity" not in line]
    assert len(losses["larger"]) >= 3 and [s for s, _ in losses["larger"]] == [s for s, _ in losses["accumulated"]]
    assert all(abs(a - b) <= 1e-3 * max(1.0, abs(a)) for (_, a), (_, b) in zip(losses["larger"],
                                                                             losses["accumulated"], strict=True))
    larger, accumulated = adapter_of(tmp_path / "larger"), adapter_of(tmp_path / "accumulated")
    assert all(torch.allclose(larger[key], accumulated[key], atol=1e-4) for key in larger)


def test_a_full_fine_tune_under_fsdp_checkpoints_each_ranks_shards_and_resumes_from_them(world, tmp_path):
    """LORA_RANK=0 under fsdp: a checkpoint is a directory of every rank's shards (DCP) with a manifest of their
    digests and the run's progress beside, not the weights and AdamW's state gathered on rank 0, written beside the
    training (CHECKPOINT_ASYNC); a run killed while a save is in flight resumes from the one before it and ends as
    the uninterrupted run did (the same shards: bit-identical), and under ddp it resumes too (resharded, to float
    rounding), past a damaged newest checkpoint that both ranks pass over."""
    import torch
    from safetensors.torch import load_file

    model, data = staged_copy(world[0], tmp_path / "model"), world[1]
    full = {"STRATEGY": "fsdp", "LORA_RANK": "0", "EPOCHS": "2", "LEARNING_RATE": "0.001"}
    whole = run_sft(model, data, tmp_path / "whole", full)
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    # written beside the training, each rank hashing what it wrote: rank 0 about half of the bytes, not all
    written = re.search(r"checkpoint step-00000010\.ckpt written \([\d.]+ s, training waited [\d.]+ s; rank 0 hashed "
                        r"([\d.]+) of ([\d.]+) MB\)", whole.stdout)
    assert written, whole.stdout[-3000:]
    assert 0.4 < float(written[1]) / float(written[2]) < 0.6
    # step 10's save (the third: steps 5, 6, 10; 6 steps an epoch) is held in rank 0's writer, its shards written;
    # rank 1 is killed as step 11 trains
    fault = fault_env("sleep=30@checkpoint=3,rank=0,attempt=0; sigkill@batch=2.5,rank=1,attempt=0")
    killed = run_sft(model, data, tmp_path / "killed", {**full, **fault})
    assert killed.returncode != 0
    checkpoints = tmp_path / "killed" / "checkpoints"
    assert sorted(path.name for path in checkpoints.iterdir()) == [
        ".tmp-step-00000010.ckpt", "step-00000005.ckpt", "step-00000006.ckpt"], killed.stdout[-3000:]
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "manifest.json", "extra.pt"} <= \
        {path.name for path in (checkpoints / "step-00000006.ckpt").iterdir()}
    shutil.copytree(tmp_path / "killed", tmp_path / "under-ddp")
    # the checkpoint holds every weight: a resume reads none of the pretrained ones (damaged now, their size and the
    # stager's SHA-256 kept, so that the model's revision is the same)
    weights = model / "model.safetensors"
    weights.write_bytes(b"\0" * weights.stat().st_size)
    resumed = run_sft(model, data, tmp_path / "killed", {**full, **fault})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "removed .tmp-step-00000010.ckpt, left by an interrupted checkpoint write" in resumed.stdout
    assert "Rank 0: resuming from step-00000006.ckpt" in resumed.stdout
    assert "every weight comes from step-00000006.ckpt: the pretrained weights are not read" in resumed.stdout
    # the ranks verify a checkpoint together, each hashing its share (rank 0: .metadata and __1_0.distcp): a shard
    # only rank 0 read is damaged, and both ranks pass over the checkpoint for the one before
    (tmp_path / "under-ddp" / "checkpoints" / "step-00000006.ckpt" / "__1_0.distcp").write_bytes(b"\0" * 64)
    under_ddp = run_sft(model, data, tmp_path / "under-ddp", {**full, **fault, "STRATEGY": "ddp"})
    assert under_ddp.returncode == 0, under_ddp.stdout[-3000:] + under_ddp.stderr[-3000:]
    assert "Rank 0: skipping checkpoint step-00000006.ckpt: __1_0.distcp does not match its checksum" \
        in under_ddp.stdout + under_ddp.stderr, under_ddp.stdout[-3000:]
    assert "Rank 1: resuming from step-00000005.ckpt" in under_ddp.stdout, under_ddp.stdout[-3000:]

    def exported(output):
        return load_file(next(output.glob("llama_sft_trained/**/model.safetensors")))

    expected = exported(tmp_path / "whole")
    for output, exact in ((tmp_path / "killed", True), (tmp_path / "under-ddp", False)):
        got = exported(output)
        assert got.keys() == expected.keys()
        assert all((got[key] == expected[key]).all() if exact else torch.allclose(got[key], expected[key], atol=1e-4)
                   for key in expected), output
