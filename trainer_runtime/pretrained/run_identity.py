"""What a transformer run is, as its checkpoints and its summary.json record it: the revisions of its model and its
tokenizer (each a digest of their files), of its data where the workload records them, its number of processes and
the settings whose change makes another run (declared ``shaping`` in trainer_contract/program_settings.py); and why
a start with other ones is refused, one line each naming the variable, as the MNIST worker refuses a changed
hyper-parameter. Torch-free: the launcher reads a finished run's record before any rendezvous
(trainer_runtime.pretrained.finished_run)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from trainer_contract.digests import file_digest, known_or_hashed, staged_sha256s
from trainer_contract.settings import noted_settings, shaping_settings
from trainer_runtime import run_record

# Files of a model directory that belong to its tokenizer (their digest is the tokenizer's revision); every
# other file but the stager's marker and hidden files is the model's.
TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                             "vocab.json", "merges.txt", "added_tokens.json", "spiece.model", "tokenizer.model",
                             "sentencepiece.bpe.model", "chat_template.jinja"})



def revision(directory: Path, tokenizer: bool) -> str:
    """A digest of the model's files (``tokenizer`` False) or of its tokenizer's: what a resume must find again. The
    same whether the stager vouches for a file's SHA-256 or it is read."""
    digest, known = hashlib.sha256(), staged_sha256s(directory)
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith(".") and (path.name in TOKENIZER_FILES) == tokenizer:
            digest.update(f"{path.name} {known_or_hashed(path, path.name, known)}\n".encode())
    return digest.hexdigest()[:16]


def data_revision(directory: Path) -> str:
    """A digest of every file of a data set (its splits' files, in any folder below it): what a resume of a workload
    that records it must find again."""
    digest, known = hashlib.sha256(), staged_sha256s(directory)
    for path in sorted(directory.glob("**/*")):
        name = path.relative_to(directory).as_posix()
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(directory).parts):
            digest.update(f"{name} {known_or_hashed(path, name, known)}\n".encode())
    return digest.hexdigest()[:16]


def record(config: Any, world_size: int, data: bool = False) -> dict[str, Any]:
    """What a checkpoint records of its run: the model's and tokenizer's revisions, the world size and the settings
    whose change makes a resumed run another run (declared ``shaping`` in trainer_contract/program_settings.py), a
    path's content too (its file's digest: the same CHAT_TEMPLATE_PATH holding another template is another run),
    and those a finished run's rerun names (``noted``: STRATEGY, PRECISION); ``data``: the data set's files too
    (DATASET_DIR's digest)."""
    shaping = {key: getattr(config, key) for key in shaping_settings(type(config))}
    recorded = {**shaping, **{key: getattr(config, key) for key in noted_settings(type(config))}}
    return {"model_revision": revision(config.model_dir, False), "tokenizer_revision": revision(config.model_dir, True),
            **({"data_revision": data_revision(config.dataset_dir)} if data else {}),
            "world_size": world_size,
            "config": {key: run_record.recorded_value(value) for key, value in recorded.items()},
            "content_revisions": {key: content_revision(value) for key, value in shaping.items()
                                  if isinstance(value, Path)}}


def content_revision(path: Path) -> str | None:
    """A digest of what a path setting names: a file's, or a directory's tokenizer files' (where a chat template
    lives: a model directory's weights are not read again); None where nothing is there (the program refuses that
    itself)."""
    if path.is_file():
        return file_digest(path)[:16]
    return revision(path, True) if path.is_dir() else None


def changes(recorded: dict[str, Any], now: dict[str, Any], what: str, config: Any) -> list[str]:
    """Why the run recorded as ``what`` (a checkpoint, the finished run) cannot be taken up with ``now``: one line
    each, then the ways out."""
    problems = [f"MODEL_DIR: {what} was trained from another {part} (revision {recorded[key]}, now "
                f"{now[key]} in {config.model_dir})"
                for key, part in (("model_revision", "model"), ("tokenizer_revision", "tokenizer"))
                if recorded.get(key) != now[key]]
    if "data_revision" in now and recorded.get("data_revision") != now["data_revision"]:
        problems.append(f"DATASET_DIR: {what} was trained on other data (revision "
                        f"{recorded.get('data_revision')}, now {now['data_revision']} in {config.dataset_dir})")
    problems += run_record.changed_settings(recorded.get("config", {}), now["config"], type(config), what)
    kept = recorded.get("content_revisions", {})  # absent from an earlier version's checkpoints: not compared
    problems += [f"{run_record.variable_of(type(config), key)}: {what} was trained with another content at "
                 f"{getattr(config, key)} (revision {kept[key]}, now {revision_now})"
                 for key, revision_now in now.get("content_revisions", {}).items()
                 if key in kept and recorded.get("config", {}).get(key) == now["config"].get(key)
                 and kept[key] != revision_now]
    if recorded.get("world_size") != now["world_size"] and not getattr(config, "global_batch_size", 0):
        problems.append(f"WORLD_SIZE: {what} was taken with {recorded.get('world_size')} processes, now "
                        f"{now['world_size']}: each process's share of the epoch would change (GLOBAL_BATCH_SIZE keeps every "
                        "step's examples on any number)")
    if problems:
        problems.append(run_record.ways_out(config.output_dir, put_back="model or value(s)"))
    return problems
