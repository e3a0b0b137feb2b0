"""The SFT rows of python -m bench.transformers: python -m worker.sft against TRL's SFTTrainer
(bench/trl_sft_baseline.py) on the same random Llama, the same chat data tokenized by worker.sft's readers (the
same token ids and learnt tokens), the same LoRA adapters and recipe, world size 2 (bench.transformers' --world),
alternating (medians):

- tokens/s per process (every token of every example, training time only). Goal >= 1.
- peak resident memory per rank (the largest rank's; the whole process: what a node must hold). Goal <= 1.
- evaluation loss after the same tokens: both adapters scored here by one function (worker.sft.loop.evaluate, the
  loss per learnt token over the whole validation split). Goal: within 2% (ours / theirs <= 1.02).
- on CUDA, the largest rank's peak CUDA memory allocated (``cuda_peak_mib``; None on the CPU).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench.stats import clean_env, launched, median_or_none, usage_log_cuda_peak, verdict, written_cuda_peak

WORLD = 2  # this machine's; bench.transformers --world passes another
RECIPE = {"BATCH_SIZE": "8", "LEARNING_RATE": "0.001", "PRECISION": "bf16", "MAX_SEQ_LENGTH": "64",
          "LORA_RANK": "8", "LORA_ALPHA": "16", "LORA_TARGET_MODULES": "all-linear", "OMP_NUM_THREADS": "1"}


def sizes(size: str) -> dict:
    if size == "quick":
        return {"hidden": 32, "layers": 2, "train": 64, "validation": 16, "epochs": 1}
    if size == "gpu":  # wider and more conversations, within bench/gpu.sh's minutes
        return {"hidden": 512, "layers": 4, "train": 2048, "validation": 128, "epochs": 1}
    return {"hidden": 256, "layers": 4, "train": 1024, "validation": 128, "epochs": 1}


def worker_run(model: Path, data: Path, epochs: int, scratch: Path, world: int) -> dict:
    output = Path(tempfile.mkdtemp(dir=scratch))
    launched("worker.sft", [], clean_env(**RECIPE, EPOCHS=epochs, MODEL_DIR=model, DATASET_DIR=data, OUTPUT_DIR=output,
                                         LOG_INTERVAL=100000, CHECKPOINT_EVERY_STEPS=0, CHECKPOINT_EVERY_SECONDS=0,
                                         TENSORBOARD="false"), world)
    peaks = [float(log.read_text().splitlines()[-1].split(" peak ")[1].split()[0])
             for log in sorted((output / "logs").glob("usage-rank*.log"))]
    return {"seconds": json.loads((output / "summary.json").read_text())["train_seconds"], "peak_mib": max(peaks),
            "cuda_peak_mib": usage_log_cuda_peak(output), "adapter": str(output / "llama_sft_trained" / "adapter")}


def trl_run(model: Path, data: Path, epochs: int, scratch: Path, world: int) -> dict:
    result = Path(tempfile.mkdtemp(dir=scratch))
    launched("bench.trl_sft_baseline", [str(model), str(data), str(result)], clean_env(**RECIPE, EPOCHS=epochs), world)
    peaks = [float(path.read_text()) for path in result.glob("peak-rank*.txt")]
    assert len(peaks) == world, peaks
    return {"seconds": json.loads((result / "result.json").read_text())["train_seconds"], "peak_mib": max(peaks),
            "cuda_peak_mib": written_cuda_peak(result), "adapter": str(result / "adapter")}


def scored(model: Path, data: Path, adapter: str) -> float:
    """The evaluation loss of base + ``adapter`` on the validation split, by worker.sft's own evaluation."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer_contract.config_reading import load_config
    from trainer_contract.program_settings import SftConfig
    from trainer_runtime.precision import Precision
    from trainer_runtime.pretrained.tables import splits
    from worker.sft.loop import evaluate
    from worker.sft.train import examples_of

    config = load_config({**RECIPE, "MODEL_DIR": str(model), "DATASET_DIR": str(data)}, config_class=SftConfig)
    tokenizer = AutoTokenizer.from_pretrained(model)
    examples = examples_of(config, tokenizer, splits(config)[1], 0)
    trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model), adapter)
    device = torch.device("cpu")
    return evaluate(trained, examples, 16, tokenizer.pad_token_id, Precision("fp32", device, sharded=False), device,
                    0, 1)["loss"]


def measure(size_name: str, repeats: int, scratch: Path, log, world: int = WORLD) -> dict:
    from transformers import AutoTokenizer

    from testbed.sft_data import make_chat_data, make_model
    from trainer_contract.config_reading import load_config
    from trainer_contract.program_settings import SftConfig
    from trainer_runtime.pretrained.tables import splits
    from worker.sft.train import examples_of

    size = sizes(size_name)
    model = make_model(scratch / "llama", hidden=size["hidden"], layers=size["layers"])
    data = make_chat_data(scratch / "chat", train=size["train"], validation=size["validation"])
    config = load_config({**RECIPE, "MODEL_DIR": str(model), "DATASET_DIR": str(data)}, config_class=SftConfig)
    train = examples_of(config, AutoTokenizer.from_pretrained(model), splits(config)[0], 0)
    tokens = size["epochs"] * sum(len(example.input_ids) for example in train)
    samples: dict[str, list[dict]] = {"worker": [], "trl": []}
    for round_ in range(repeats):
        log(f"supervised fine-tuning, round {round_ + 1} of {repeats}: worker.sft, then TRL's SFTTrainer...")
        for name, run in (("worker", worker_run), ("trl", trl_run)):
            sample = run(model, data, size["epochs"], scratch, world)
            sample["tokens_per_second"] = tokens / world / sample.pop("seconds")
            sample["evaluation_loss"] = scored(model, data, sample.pop("adapter"))
            samples[name].append(sample)
    return {"sft": {"sizes": size, "tokens": tokens, "world": world,
                    **{name: {key: median_or_none([s[key] for s in runs]) for key in runs[0]}
                       for name, runs in samples.items()}}}


def rows(r: dict) -> list[tuple[str, ...]]:
    size, ours, theirs = r["sft"]["sizes"], r["sft"]["worker"], r["sft"]["trl"]
    world = r["sft"].get("world", WORLD)
    model = f"Llama {size['layers']}x{size['hidden']}, LoRA r{RECIPE['LORA_RANK']} all-linear"
    speed = ours["tokens_per_second"] / theirs["tokens_per_second"]
    memory = ours["peak_mib"] / theirs["peak_mib"]
    loss = ours["evaluation_loss"] / theirs["evaluation_loss"]
    return [(f"SFT tokens/s per process, ws {world}, {model}, bf16", f"{ours['tokens_per_second']:.0f} (worker.sft, DDP)",
             f"{theirs['tokens_per_second']:.0f} (TRL SFTTrainer)", f"{speed:.2f}", verdict(speed, 1, False)),
            (f"SFT peak resident memory per rank, ws {world} (MiB)", f"{ours['peak_mib']:.0f}", f"{theirs['peak_mib']:.0f}",
             f"{memory:.2f}", verdict(memory, 1, True)),
            (f"SFT evaluation loss after the same {r['sft']['tokens']} tokens", f"{ours['evaluation_loss']:.4f}",
             f"{theirs['evaluation_loss']:.4f}", f"{loss:.3f}", verdict(loss, 1.02, True))]
