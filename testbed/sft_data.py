"""A tiny causal-LM world for the supervised fine-tuning tests, made on the spot (no model hub here): a byte-level
BPE tokenizer with a ChatML chat template (Qwen's layout: <|im_start|>role, the content, <|im_end|>), trained on a
few sentences, saved with ``save_pretrained`` as the Hub would serve it."""

from __future__ import annotations

from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = ["the quick brown fox jumps over the lazy dog", "what is the capital of france? paris",
          "add two and three: five", "system user assistant tool", "hello, how can I help you today?"]


def make_tokenizer(directory: Path, vocab_size: int = 320, chat_template: str | None = CHAT_TEMPLATE):
    """A fast tokenizer: byte-level (every text has tokens), end of a turn <|im_end|> as its EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    return tokenizer


def make_model(directory: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random Llama-style causal LM sized to the tokenizer above, saved with its tokenizer as the Hub would serve
    them (safetensors)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_tokenizer(directory)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=False, initializer_range=0.2,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    return directory


FACTS = {"sky": "blue", "grass": "green", "snow": "white", "coal": "black", "sun": "yellow", "blood": "red",
         "sea": "blue", "night": "dark"}
FILLERS = ["tell me", "please say", "quick question", "hello", "hey", "so", "well", "ok"]


def make_chat_data(directory: Path, train: int = 96, validation: int = 16, seed: int = 0,
                   shape: str = "messages") -> Path:
    """Learnable instruction data: "<filler>, what colour is the <thing>?" answered with its colour, as JSON lines
    (``messages``: a user and an assistant turn; ``prompt_completion``: the same as two columns)."""
    import json
    import random

    generator = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    things = sorted(FACTS)
    for split, count in (("train", train), ("validation", validation)):
        lines = []
        for _ in range(count):
            thing = generator.choice(things)
            question = f"{generator.choice(FILLERS)}, what colour is the {thing}?"
            if shape == "messages":
                record = {"messages": [{"role": "user", "content": question},
                                       {"role": "assistant", "content": FACTS[thing]}]}
            else:
                record = {"prompt": question + " ", "completion": FACTS[thing]}
            lines.append(json.dumps(record))
        (directory / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def serve_capybara_example(hub) -> None:
    """examples/sft's repositories on the tests' Hub (testbed/storage_servers.py): a tiny random Llama with its
    chat template as Qwen/Qwen2.5-0.5B-Instruct, and learnable conversations as trl-lib/Capybara's parquet files
    (data/train-*, data/test-*: a messages column)."""
    import json
    import tempfile

    import pyarrow
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as scratch:
        model = make_model(Path(scratch) / "model")
        hub.add("Qwen/Qwen2.5-0.5B-Instruct", {path.name: path.read_bytes() for path in model.iterdir()})
        chats = make_chat_data(Path(scratch) / "chats", train=64, validation=16)
        files = {}
        for split, source in (("train", "train"), ("test", "validation")):
            rows = [json.loads(line) for line in (chats / f"{source}.jsonl").read_text().splitlines()]
            path = Path(scratch) / f"{split}.parquet"
            pq.write_table(pyarrow.Table.from_pylist(rows), path)
            files[f"data/{split}-00000-of-00001.parquet"] = path.read_bytes()
        hub.add("trl-lib/Capybara", files, repo_type="dataset")
