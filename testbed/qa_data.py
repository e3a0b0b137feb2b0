"""A tiny question-answering world for the tests, made on the spot (nothing leaves a registry package here): a
WordPiece vocabulary, a random 2-layer BERT saved with ``save_pretrained`` (its fast tokenizer beside it), and
SQuAD-format questions a small model learns in a few hundred steps: every context is filler words with one
"answer word" among them, and the answer is that word."""

from __future__ import annotations

import json
import random
from pathlib import Path

FILLERS = [f"w{index}" for index in range(40)]
ANSWERS = [f"a{index}" for index in range(20)]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
QUESTION_WORDS = ["what", "is", "the", "answer", "?"]


def make_model(directory: Path, hidden: int = 32, seed: int = 0, dropout: float = 0.0, layers: int = 2) -> Path:
    """A random BertForQuestionAnswering and its tokenizer, as the Hub would serve them."""
    import torch
    from transformers import BertConfig, BertForQuestionAnswering, BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocabulary = directory / "vocab.txt"
    vocabulary.write_text("\n".join(SPECIAL + QUESTION_WORDS + FILLERS + ANSWERS) + "\n")
    tokenizer = BertTokenizerFast(str(vocabulary), do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(SPECIAL + QUESTION_WORDS + FILLERS + ANSWERS), hidden_size=hidden,
                        num_hidden_layers=layers, num_attention_heads=max(2, hidden // 64), intermediate_size=2 * hidden,
                        max_position_embeddings=128,
                        # dropout 0 by default: the question-answering run's resume is exact by its loader alone
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    BertForQuestionAnswering(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def squad_document(count: int, seed: int) -> dict:
    """``count`` questions in the SQuAD JSON layout, one paragraph each."""
    rng = random.Random(seed)
    paragraphs = []
    for index in range(count):
        words = rng.choices(FILLERS, k=rng.randint(8, 24))
        answer = rng.choice(ANSWERS)
        at = rng.randint(0, len(words))
        words.insert(at, answer)
        context = " ".join(words)
        start = len(" ".join(words[:at])) + (1 if at else 0)
        paragraphs.append({"context": context, "qas": [{
            "id": f"q{seed}-{index}", "question": "what is the answer ?",
            "answers": [{"text": answer, "answer_start": start}]}]})
    return {"version": "1.1", "data": [{"title": "synthetic", "paragraphs": paragraphs}]}


def make_squad(directory: Path, train: int = 512, validation: int = 64) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train-v1.1.json").write_text(json.dumps(squad_document(train, 1)))
    (directory / "dev-v1.1.json").write_text(json.dumps(squad_document(validation, 2)))
    return directory


def serve_squad_example(hub) -> None:
    """examples/bert-squad's two repositories on the tests' Hub (testbed/storage_servers.py): a tiny random BERT as
    google-bert/bert-base-uncased, and learnable questions as rajpurkar/squad's parquet files."""
    import tempfile

    import pyarrow
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as scratch:
        model = make_model(Path(scratch) / "model")
        hub.add("google-bert/bert-base-uncased", {path.name: path.read_bytes() for path in model.iterdir()})
        files = {}
        for split, count, seed in (("train", 512, 1), ("validation", 64, 2)):
            rows = [{"id": qa["id"], "title": "synthetic", "context": paragraph["context"], "question": qa["question"],
                     "answers": {"text": [qa["answers"][0]["text"]], "answer_start": [qa["answers"][0]["answer_start"]]}}
                    for paragraph in squad_document(count, seed)["data"][0]["paragraphs"] for qa in paragraph["qas"]]
            path = Path(scratch) / f"{split}.parquet"
            pq.write_table(pyarrow.Table.from_pylist(rows), path)
            files[f"plain_text/{split}-00000-of-00001.parquet"] = path.read_bytes()
        hub.add("rajpurkar/squad", files, repo_type="dataset")
