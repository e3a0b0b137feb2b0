"""A tiny text-classification world for the tests of python -m worker.finetune: the vocabulary and random BERT of
testbed/qa_data.py, and labelled texts a small model learns in a few dozen steps: filler words with one "answer
word" among them, whose half of the answer words is the label (negative: a0-a9, positive: a10-a19), as IMDB's
reviews are negative or positive."""

from __future__ import annotations

import json
import random
from pathlib import Path

from testbed.qa_data import ANSWERS, FILLERS

LABELS = ("negative", "positive")


def label_of(word: str) -> int:
    return ANSWERS.index(word) * len(LABELS) // len(ANSWERS)


def rows(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        words = rng.choices(FILLERS, k=rng.randint(3, 8))
        answer = rng.choice(ANSWERS)
        words.insert(rng.randint(0, len(words)), answer)
        made.append({"text": " ".join(words), "label": label_of(answer)})
    return made


def make_texts(directory: Path, train: int = 256, validation: int = 64, named: bool = True) -> Path:
    """train.csv and validation.jsonl; labels as names (``named``) or class numbers."""
    directory.mkdir(parents=True, exist_ok=True)
    train_rows, validation_rows = rows(train, 1), rows(validation, 2)
    if named:
        for row in train_rows + validation_rows:
            row["label"] = LABELS[row["label"]]
    with (directory / "train.csv").open("w") as handle:
        handle.write("text,label\n" + "".join(f"{row['text']},{row['label']}\n" for row in train_rows))
    (directory / "validation.jsonl").write_text("".join(json.dumps(row) + "\n" for row in validation_rows))
    return directory


def imdb_files() -> dict[str, bytes]:
    """stanfordnlp/imdb's parquet files, learnable: train, test, and the unlabelled split (label -1) that the run
    must leave alone; by their paths in the repository."""
    import io

    import pyarrow
    import pyarrow.parquet as pq

    files = {}
    for split, count, seed in (("train", 256, 1), ("test", 64, 2), ("unsupervised", 16, 3)):
        made = rows(count, seed)
        if split == "unsupervised":
            made = [{**row, "label": -1} for row in made]
        buffer = io.BytesIO()
        pq.write_table(pyarrow.Table.from_pylist(made), buffer)
        files[f"plain_text/{split}-00000-of-00001.parquet"] = buffer.getvalue()
    return files


def serve_imdb_example(hub) -> None:
    """examples/hub-finetune's repositories on the tests' Hub (testbed/storage_servers.py): a tiny random BERT as
    distilbert/distilbert-base-uncased, and ``imdb_files`` as stanfordnlp/imdb."""
    import tempfile

    from testbed.qa_data import make_model

    with tempfile.TemporaryDirectory() as scratch:
        model = make_model(Path(scratch) / "model")
        hub.add("distilbert/distilbert-base-uncased", {path.name: path.read_bytes() for path in model.iterdir()})
    hub.add("stanfordnlp/imdb", imdb_files(), repo_type="dataset")
