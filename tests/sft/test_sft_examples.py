"""Supervised fine-tuning examples (worker/sft/examples.py) against a real byte-level BPE tokenizer with a ChatML
chat template (testbed/sft_data.py): what is supervised, what is refused, and packing; properties with hypothesis."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.sft_data import CHAT_TEMPLATE, make_tokenizer
from trainer_runtime.pretrained.tables import DatasetError, Split, read_table, split_files
from worker.sft.examples import IGNORE, Example, conversation, pack, prompt_completion, shape_of, tokenized

COLUMNS = {"messages": "messages", "prompt": "prompt", "completion": "completion"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def supervised_text(tokenizer, example: Example) -> str:
    return tokenizer.decode([label for label in example.labels if label != IGNORE])


def test_a_prompt_is_context_and_its_completion_with_the_end_of_sequence_is_learnt(tokenizer):
    example = prompt_completion(tokenizer, "add two and three:", " five", max_length=64)
    assert supervised_text(tokenizer, example) == " five<|im_end|>"
    prompt_tokens = len(tokenizer("add two and three:", add_special_tokens=False)["input_ids"])
    assert example.labels[:prompt_tokens] == [IGNORE] * prompt_tokens
    assert tokenizer.decode(example.input_ids) == "add two and three: five<|im_end|>"


def test_only_the_assistant_turns_are_learnt_each_with_its_end_of_turn(tokenizer):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "capital of france?"},
                {"role": "assistant", "content": "paris"}, {"role": "user", "content": "and of italy?"},
                {"role": "assistant", "content": "rome"}]
    example = conversation(tokenizer, messages, max_length=256)
    assert supervised_text(tokenizer, example) == "paris<|im_end|>\nrome<|im_end|>\n"
    assert tokenizer.decode(example.input_ids) == tokenizer.apply_chat_template(messages, tokenize=False)


def test_a_long_example_is_cut_to_the_maximum_length(tokenizer):
    example = prompt_completion(tokenizer, "hello " * 20, "world " * 20, max_length=16)
    assert len(example.input_ids) == len(example.labels) == 16


@pytest.mark.parametrize("record, message", [
    ([], "messages must be a non-empty list"),
    ("hello", "messages must be a non-empty list"),
    ([{"role": "user", "content": "hi"}], "no assistant message, nothing to learn from"),
    ([{"role": "wizard", "content": "hi"}, {"role": "assistant", "content": "x"}], "message 0: expected {role: one of"),
    ([{"role": "user", "content": 3}, {"role": "assistant", "content": "x"}], "message 0: expected {role"),
    ([{"role": "user", "content": "hi"}, "assistant: x"], "message 1: expected {role"),
])
def test_a_malformed_conversation_is_refused_naming_the_record(tokenizer, record, message):
    with pytest.raises(DatasetError, match=message) as refused:
        conversation(tokenizer, record, 64, where="the train split's record 7")
    assert str(refused.value).startswith("the train split's record 7")


def test_a_template_that_renders_turns_otherwise_alone_is_refused_not_guessed(tmp_path):
    # the generation prompt names the assistant "bot", the conversation "assistant": no prefix to cut at
    other = make_tokenizer(tmp_path, chat_template=CHAT_TEMPLATE.replace("<|im_start|>assistant\n{% endif %}",
                                                                         "<|im_start|>bot\n{% endif %}"))
    with pytest.raises(DatasetError, match="renders the turns before assistant message 1 otherwise alone"):
        conversation(other, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], 64)


def test_conversations_need_a_chat_template(tmp_path):
    plain = make_tokenizer(tmp_path, chat_template=None)
    with pytest.raises(DatasetError, match="has no chat template"):
        conversation(plain, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}], 64)


@pytest.mark.parametrize("columns, shape", [
    (["messages"], "conversations"),
    (["messages", "prompt", "completion"], "conversations"),
    (["prompt", "completion", "id"], "prompt_completion"),
])
def test_the_shape_is_read_from_the_columns(columns, shape):
    assert shape_of(columns) == shape


def test_neither_shape_is_refused_naming_the_variables():
    with pytest.raises(DatasetError, match=r"set MESSAGES_COLUMN, or PROMPT_COLUMN and COMPLETION_COLUMN.*") as refused:
        shape_of(["text", "label"])
    assert "its columns: label, text" in str(refused.value)


def test_a_split_read_from_the_hubs_layout_is_tokenized_in_order(tokenizer, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    records = [{"messages": [{"role": "user", "content": f"q{index}"}, {"role": "assistant", "content": f"a{index}"}]}
               for index in range(3)]
    (data / "train.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    examples = tokenized(tokenizer, read_table(split_files(data, "train")), 64, "train", COLUMNS)
    assert [supervised_text(tokenizer, example) for example in examples] == [f"a{i}<|im_end|>\n" for i in range(3)]


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(prompt=texts, completion=texts, max_length=st.integers(1, 64))
def test_supervised_tokens_are_the_completions_whatever_the_text(tokenizer, prompt, completion, max_length):
    example = prompt_completion(tokenizer, prompt, completion, max_length)
    assert len(example.input_ids) == len(example.labels) <= max_length
    assert all(label in (IGNORE, token) for label, token in zip(example.labels, example.input_ids, strict=True))
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    # the supervised tokens are the completion's, in order, as far as the cut allows
    supervised = [label for label in example.labels if label != IGNORE]
    assert supervised == completion_ids[:len(supervised)]


turns = st.lists(st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), texts), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(turns=turns, answer=texts)
def test_no_token_of_a_user_turn_is_ever_supervised(tokenizer, turns, answer):
    messages = [{"role": role, "content": content} for role, content in turns]
    messages.append({"role": "assistant", "content": answer})
    example = conversation(tokenizer, messages, max_length=4096)
    assert all(label in (IGNORE, token) for label, token in zip(example.labels, example.input_ids, strict=True))
    expected = "".join(f"{m['content']}<|im_end|>\n" for m in messages if m["role"] == "assistant")
    assert supervised_text(tokenizer, example) == expected


examples = st.lists(st.lists(st.tuples(st.integers(0, 300), st.booleans()), min_size=1, max_size=30), max_size=12)


@given(examples=examples, block=st.integers(1, 40))
def test_packing_makes_full_blocks_of_the_examples_end_to_end(examples, block):
    made = [Example([token for token, _ in pairs], [token if learnt else IGNORE for token, learnt in pairs])
            for pairs in examples]
    blocks = pack(made, block)
    assert all(len(b.input_ids) == len(b.labels) == block for b in blocks)
    ids = [token for example in made for token in example.input_ids]
    labels = [label for example in made for label in example.labels]
    assert len(blocks) == len(ids) // block
    assert [token for b in blocks for token in b.input_ids] == ids[:len(blocks) * block]
    assert [label for b in blocks for label in b.labels] == labels[:len(blocks) * block]


def test_a_chat_template_that_loops_is_stopped_and_refused_by_name(tmp_path, monkeypatch):
    """A template is code from the model's repository: Jinja's sandbox bounds what it can reach, not how long it
    runs. One that loops (10^10 iterations here) is stopped after the time limit and refused, exit 78."""
    import time

    from trainer_runtime.failures import Refusal
    from worker.sft import examples

    looping = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}" + CHAT_TEMPLATE
    monkeypatch.setattr(examples, "CHAT_TEMPLATE_SECONDS", 1.0)
    slow = make_tokenizer(tmp_path, chat_template=looping)
    began = time.monotonic()
    with pytest.raises(Refusal, match="the chat template took more than 1 s to render 2 turn") as refused:
        conversation(slow, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], 64)
    assert refused.value.code == 78 and time.monotonic() - began < 10


# A template of another shape than the tokenizer's ChatML: "### role" headers, a blank line after each turn.
OTHER_TEMPLATE = ("{% for message in messages %}### {{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n\n"
                  "{% endfor %}{% if add_generation_prompt %}### assistant\n{% endif %}")


def test_chat_template_path_renders_the_conversation_with_a_file_or_a_tokenizers_own(tmp_path):
    from worker.sft.examples import chat_template_from

    (tmp_path / "other.jinja").write_text(OTHER_TEMPLATE)
    plain = make_tokenizer(tmp_path / "plain", chat_template=None)  # conversations need a template: this one has none
    plain.chat_template = chat_template_from(tmp_path / "other.jinja")
    messages = [{"role": "user", "content": "capital of france?"}, {"role": "assistant", "content": "paris"}]
    example = conversation(plain, messages, max_length=256)
    assert plain.decode(example.input_ids) == "### user\ncapital of france?<|im_end|>\n\n### assistant\nparis<|im_end|>\n\n"
    assert supervised_text(plain, example) == "paris<|im_end|>\n\n"
    make_tokenizer(tmp_path / "chatml")  # a tokenizer directory: its own template, as save_pretrained wrote it
    assert chat_template_from(tmp_path / "chatml") == CHAT_TEMPLATE


@pytest.mark.parametrize("make, words", [
    (lambda root: root / "missing.jinja", "is not a file, nor a directory holding chat_template.jinja"),
    (lambda root: make_tokenizer(root / "bare", chat_template=None) and root / "bare", "holds no chat template"),
    (lambda root: (root / "t.jinja").write_text("{% for m in messages %}") and root / "t.jinja",
     "is not a Jinja template: line 1:"),
    (lambda root: (root / "big.jinja").write_bytes(b"x" * (1 << 20 | 1)) and root / "big.jinja", "is over 1048576"),
])
def test_a_chat_template_path_without_a_template_is_refused_naming_the_variable(tmp_path, make, words):
    from trainer_contract import exit_codes
    from trainer_runtime.failures import Refusal
    from worker.sft.examples import chat_template_from

    path = make(tmp_path)
    with pytest.raises(Refusal) as refused:
        chat_template_from(path)
    assert refused.value.code == exit_codes.BAD_CONFIG
    assert refused.value.problems[0].startswith(f"CHAT_TEMPLATE_PATH: {path} ") and words in refused.value.problems[0]


def test_examples_whose_supervised_tokens_the_cut_took_away_are_left_out_and_said(tokenizer, tmp_path):
    """A prompt that fills MAX_SEQ_LENGTH leaves its example nothing to learn: a batch of only such examples would
    have a loss that is a mean over nothing (NaN). It is left out, with one line; a split of only such is refused."""
    from trainer_contract.config_reading import load_config
    from trainer_contract.program_settings import SftConfig
    from worker.sft.examples import learnable
    from worker.sft.train import examples_of

    records = [{"prompt": "short:", "completion": " yes"}, {"prompt": "long " * 40, "completion": " no"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    config = load_config({"DATASET_DIR": str(tmp_path), "MAX_SEQ_LENGTH": "16"}, config_class=SftConfig)

    def train() -> Split:
        return Split("train", "the train split (train.jsonl)", read_table(split_files(tmp_path, "train")))

    said = []
    kept = examples_of(config, tokenizer, train(), 0, said.append)
    assert [supervised_text(tokenizer, example) for example in kept] == [" yes<|im_end|>"]
    assert said == ["1 of the 2 examples of the train split (train.jsonl) left out: MAX_SEQ_LENGTH=16 cut away every "
                    "supervised token of each"]
    # the first token is never predicted: a label there alone is not learnable
    assert learnable([Example([5, 6], [5, IGNORE])]) == []
    (tmp_path / "train.jsonl").write_text(json.dumps(records[1]) + "\n")
    with pytest.raises(DatasetError, match=r"none of the 1 examples of the train split \(train.jsonl\) has a supervised "
                                           r"token within MAX_SEQ_LENGTH=16 tokens \(the prompts fill it\): raise "
                                           r"MAX_SEQ_LENGTH"):
        examples_of(config, tokenizer, train(), 0)


# A ChatML template that renders tools and tool calls as Qwen's does in outline: the tool schemas in a system turn,
# an assistant's calls after its text, a tool's result as its own turn.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools: {{ tools | map(attribute='function') | map(attribute='name') | join(', ') }}"
    "<|im_end|>\n{% endif %}{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{% for call in message.get('tool_calls') or [] %}<call>{{ call['function']['name'] }}"
    "({{ call['function']['arguments'] | tojson }})</call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WEATHER = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
CALLING = [{"role": "user", "content": "weather in paris?"},
           {"role": "assistant", "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "paris"}}}]},
           {"role": "tool", "name": "weather", "tool_call_id": "0", "content": "sunny"},
           {"role": "assistant", "content": "it is sunny"}]


def test_tool_calls_are_rendered_and_learnt_and_tool_results_and_schemas_are_context(tmp_path):
    tokenizer = make_tokenizer(tmp_path / "tokenizer", chat_template=TOOL_TEMPLATE)
    table = {"messages": [CALLING], "tools": [WEATHER]}
    (example,) = tokenized(tokenizer, table, 512, "the train split", COLUMNS)
    text = tokenizer.decode(example.input_ids)
    assert text.startswith("<|im_start|>system\ntools: weather<|im_end|>\n<|im_start|>user\nweather in paris?")
    assert '<|im_start|>tool\nsunny<|im_end|>' in text
    assert supervised_text(tokenizer, example) == '<call>weather({"city": "paris"})</call><|im_end|>\nit is sunny<|im_end|>\n'


@pytest.mark.parametrize("record, message", [
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}], "message 1: expected {role"),
    ([{"role": "user", "content": "hi", "tool_calls": CALLING[1]["tool_calls"]}, {"role": "assistant", "content": "x"}],
     "message 0: tool_calls must be an assistant message's list"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [{"name": "weather"}]}],
     "message 1: tool_calls must be an assistant message's list"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "tool_calls": "weather()"}],
     "message 1: tool_calls must be"),
    ([{"role": "tool", "content": "sunny", "tool_call_id": 7}, {"role": "assistant", "content": "x"}],
     "message 0: tool_call_id must be text"),
])
def test_a_malformed_tool_call_or_result_is_refused_naming_the_message(tokenizer, record, message):
    with pytest.raises(DatasetError, match=message) as refused:
        conversation(tokenizer, record, 64, where="the train split's record 3")
    assert str(refused.value).startswith("the train split's record 3")


def test_tools_that_are_not_a_list_of_schemas_are_refused(tokenizer):
    with pytest.raises(DatasetError, match="tools must be a list of tool schemas"):
        conversation(tokenizer, CALLING, 64, where="record 0", tools="weather")
