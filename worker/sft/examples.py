"""Supervised fine-tuning examples: a split's records, tokenized with the loss on what the model must learn to say.

Two shapes, as the Hub's instruction data sets come (read by trainer_runtime.pretrained.tables):

- **prompt/completion** (the columns ``prompt`` and ``completion`` by default): prompt and completion are
  tokenized apart and concatenated, the completion ending with the end-of-sequence token; only the completion's
  tokens are supervised.
- **conversations** (a ``messages`` column: lists of ``{"role", "content"}``): rendered with the tokenizer's chat
  template; only the assistant turns' tokens are supervised. Which tokens those are is read from the template
  itself: the rendering of the turns before an assistant turn (with the generation prompt) and of the turns up to
  its end must each be a prefix of the whole conversation's tokens; a template for which they are not is refused
  by name rather than guessed at.

Every example is cut to ``max_length`` tokens; ``pack`` concatenates a split's examples and cuts them into blocks of
exactly ``max_length`` (no padding, the labels carried along). The labels of unsupervised tokens are IGNORE (the
value torch's cross-entropy skips); the model shifts labels itself (Hugging Face's causal LM convention).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainer_contract import exit_codes
from trainer_runtime.failures import Refusal
from trainer_runtime.pretrained.tables import DatasetError

IGNORE = -100
_MARKER = "\x00indexed-trainer\x00"  # stands for a turn's content where only what comes before it is wanted
ROLES = ("system", "user", "assistant", "tool")
TOOL_RESULT_FIELDS = ("name", "tool_call_id")  # a tool turn's, kept where the data has them
TOOLS_COLUMN = "tools"  # a conversation's tool schemas, where the data has the column: rendered as the template does
# A chat template is code from the model's repository: Jinja's sandbox keeps it from the system, not from looping.
# One rendering longer than this is a template that loops, refused rather than left to hang every rank.
CHAT_TEMPLATE_SECONDS = 10.0
Shape = Literal["prompt_completion", "conversations"]


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]  # IGNORE where the token is not supervised, else the token itself

    @property
    def supervised(self) -> int:
        return sum(label != IGNORE for label in self.labels)


def shape_of(columns: Iterable[str], messages: str = "messages", prompt: str = "prompt",
             completion: str = "completion") -> Shape:
    """Which shape a split's columns hold; DatasetError naming both choices when neither is there."""
    names = set(columns)
    if messages in names:
        return "conversations"
    if prompt in names and completion in names:
        return "prompt_completion"
    raise DatasetError(f"the data has neither a {messages!r} column (conversations) nor {prompt!r} and "
                       f"{completion!r} columns (its columns: {', '.join(sorted(names))}); set MESSAGES_COLUMN, or "
                       "PROMPT_COLUMN and COMPLETION_COLUMN, to the columns that hold them")


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_completion(tokenizer: Any, prompt: str, completion: str, max_length: int) -> Example:
    """The prompt's tokens unsupervised, the completion's and the end-of-sequence token supervised."""
    prompt_ids = ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []) + _ids(tokenizer, prompt)
    completion_ids = _ids(tokenizer, completion) + [tokenizer.eos_token_id]
    ids = (prompt_ids + completion_ids)[:max_length]
    labels = ([IGNORE] * len(prompt_ids) + completion_ids)[:max_length]
    return Example(ids, labels)


def _messages(record: Any, where: str) -> list[dict[str, Any]]:
    """A conversation as the chat template takes it, tool calls and tool results included (the fields of
    transformers' chat format: an assistant turn's ``tool_calls``, a tool turn's ``name`` and ``tool_call_id``);
    DatasetError naming the record when it is not one."""
    if not isinstance(record, Sequence) or isinstance(record, (str, bytes)) or not record:
        raise DatasetError(f"{where}: messages must be a non-empty list of {{role, content}}")
    messages = [_message(message, f"{where}, message {turn}") for turn, message in enumerate(record)]
    if not any(message["role"] == "assistant" for message in messages):
        raise DatasetError(f"{where}: no assistant message, nothing to learn from")
    return messages


def _message(message: Any, where: str) -> dict[str, Any]:
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    if (not isinstance(message, Mapping) or message.get("role") not in ROLES
            or not (isinstance(content, str) or (content is None and calls))):
        raise DatasetError(f"{where}: expected {{role: one of {', '.join(ROLES)}, content: text}}, found "
                           f"{str(message)[:80]!r}")
    kept: dict[str, Any] = {"role": message["role"], "content": content or ""}
    if calls is not None:
        if message["role"] != "assistant" or not _tool_calls(calls):
            raise DatasetError(f"{where}: tool_calls must be an assistant message's list of {{type: function, "
                               f"function: {{name, arguments}}}}, found {str(calls)[:80]!r}")
        kept["tool_calls"] = calls
    for key in TOOL_RESULT_FIELDS:
        if message.get(key) is not None:
            if not isinstance(message[key], str):
                raise DatasetError(f"{where}: {key} must be text, found {str(message[key])[:80]!r}")
            kept[key] = message[key]
    return kept


def _tool_calls(calls: Any) -> bool:
    """Whether ``calls`` is a list of function calls as chat templates read them."""
    return (isinstance(calls, Sequence) and not isinstance(calls, (str, bytes)) and bool(calls)
            and all(isinstance(call, Mapping) and isinstance(call.get("function"), Mapping)
                    and isinstance(call["function"].get("name"), str)
                    and isinstance(call["function"].get("arguments"), (Mapping, str)) for call in calls))


def conversation(tokenizer: Any, record: Any, max_length: int, where: str = "a conversation",
                 tools: Any = None) -> Example:
    """The conversation rendered with the chat template (with ``tools``, its tool schemas, where it has some); the
    assistant turns' tokens supervised, their tool calls included."""
    if not getattr(tokenizer, "chat_template", None):
        raise DatasetError("the tokenizer has no chat template, so conversations (a messages column) cannot be "
                           "rendered: use a model whose tokenizer has one, or prompt/completion columns")
    messages = _messages(record, where)
    if tools is not None and not (isinstance(tools, Sequence) and not isinstance(tools, (str, bytes))
                                  and all(isinstance(tool, Mapping) for tool in tools)):
        raise DatasetError(f"{where}: {TOOLS_COLUMN} must be a list of tool schemas, found {str(tools)[:80]!r}")
    options = {"tools": list(tools)} if tools else {}

    def render(turns: list[dict[str, Any]], generation_prompt: bool) -> list[int]:
        return _ids(tokenizer, chat(tokenizer, turns, add_generation_prompt=generation_prompt, **options))

    ids = render(messages, False)
    labels = [IGNORE] * len(ids)
    for turn, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = _opening(tokenizer, message, options) if turn == 0 else render(messages[:turn], True)
        end = render(messages[:turn + 1], False)
        if ids[:len(start)] != start or ids[:len(end)] != end:
            raise DatasetError(f"{where}: the chat template renders the turns before assistant message {turn} "
                               "otherwise alone than within the whole conversation, so its tokens cannot be told "
                               "apart; use prompt/completion columns, or a model whose template renders turn by turn")
        labels[len(start):len(end)] = ids[len(start):len(end)]
    return Example(ids[:max_length], labels[:max_length])


class _Expired(Exception):
    pass


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """SIGALRM after ``seconds`` raises in the code running then (a template's Python loop); only the main thread
    receives signals, so elsewhere no limit applies."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


CHAT_TEMPLATE_BYTES = 1 << 20  # a template is text; more is no template
TEMPLATE_FILES = ("chat_template.jinja", "tokenizer_config.json")  # where a tokenizer directory keeps it


def chat_template_from(path: Path) -> str:
    """CHAT_TEMPLATE_PATH's template (TRL's chat_template_path): a Jinja file, or a tokenizer directory's own
    (chat_template.jinja, else tokenizer_config.json's chat_template); refused (78) when there is none or Jinja
    cannot compile it. Only read: transformers renders it in Jinja's sandbox, as every template."""
    def refused(why: str) -> Refusal:
        return Refusal(exit_codes.BAD_CONFIG, [f"CHAT_TEMPLATE_PATH: {path} {why}"])

    candidates = [path / name for name in TEMPLATE_FILES] if path.is_dir() else [path]
    found = next((candidate for candidate in candidates if candidate.is_file()), None)
    if found is None:
        raise refused("is not a file, nor a directory holding chat_template.jinja or tokenizer_config.json")
    if found.stat().st_size > CHAT_TEMPLATE_BYTES:
        raise refused(f"is over {CHAT_TEMPLATE_BYTES} bytes: not a chat template")
    try:
        text = found.read_text(encoding="utf-8")
        template = json.loads(text).get("chat_template") if found.name == "tokenizer_config.json" else text
    except (UnicodeDecodeError, ValueError, AttributeError) as error:
        raise refused(f"is unreadable ({type(error).__name__})") from None
    if isinstance(template, list):  # several named templates: the default one, as transformers picks it
        template = next((item.get("template") for item in template if isinstance(item, dict)
                         and item.get("name") == "default"), None)
    if not isinstance(template, str) or not template.strip():
        raise refused(f"holds no chat template ({found.name})")
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        ImmutableSandboxedEnvironment().parse(template)
    except TemplateSyntaxError as error:
        raise refused(f"is not a Jinja template: line {error.lineno}: {error.message}") from None
    return template


def chat(tokenizer: Any, turns: list[dict[str, Any]], **options: Any) -> str:
    """``turns`` rendered by the tokenizer's chat template, in at most CHAT_TEMPLATE_SECONDS."""
    try:
        with _time_limit(CHAT_TEMPLATE_SECONDS):
            return tokenizer.apply_chat_template(turns, tokenize=False, **options)
    except _Expired:
        raise Refusal(exit_codes.BAD_CONFIG, [
            f"the chat template took more than {CHAT_TEMPLATE_SECONDS:g} s to render {len(turns)} turn(s), so it "
            "was stopped (a template that loops would hang the job): use a model whose template renders promptly, "
            "or prompt/completion columns"]) from None


def _opening(tokenizer: Any, first: dict[str, Any], options: dict[str, Any]) -> list[int]:
    """The tokens before the content of a conversation's first turn when it is the assistant's (its header, and a
    default system prompt where the template adds one): the template renders that turn with a marker for its
    content, and the text before the marker is tokenized (the caller checks it is a prefix of the whole)."""
    text = chat(tokenizer, [{**first, "content": _MARKER}], **options)
    return _ids(tokenizer, text[:text.find(_MARKER)]) if _MARKER in text else []


def tokenized(tokenizer: Any, table: Mapping[str, list[Any]], max_length: int, source: str,
              columns: Mapping[str, str]) -> list[Example]:
    """Every record of a split's ``table`` (read from ``source``, as errors name it), in order; ``columns``:
    messages, prompt and completion's names."""
    shape = shape_of(table, columns["messages"], columns["prompt"], columns["completion"])
    if shape == "conversations":
        tools = table.get(TOOLS_COLUMN) or [None] * len(table[columns["messages"]])
        return [conversation(tokenizer, record, max_length, f"{source}, record {index}", tools[index])
                for index, record in enumerate(table[columns["messages"]])]
    return [prompt_completion(tokenizer, str(prompt), str(completion), max_length)
            for prompt, completion in zip(table[columns["prompt"]], table[columns["completion"]], strict=True)]


def learnable(examples: Iterable[Example]) -> list[Example]:
    """The examples with a supervised token the loss sees (never the first: nothing predicts it). One whose
    supervised tokens the cut to ``max_length`` took away teaches nothing, and a batch of only such examples has a
    loss that is a mean over nothing (NaN), so it is left out."""
    return [example for example in examples if any(label != IGNORE for label in example.labels[1:])]


def pack(examples: Iterable[Example], block: int) -> list[Example]:
    """The examples end to end, cut into blocks of exactly ``block`` tokens; the last partial block is dropped (no
    padding, as packing is for). Attention crosses the examples' borders within a block, as in plain packing."""
    ids: list[int] = []
    labels: list[int] = []
    blocks = []
    for example in examples:
        ids += example.input_ids
        labels += example.labels
        while len(ids) >= block:
            blocks.append(Example(ids[:block], labels[:block]))
            ids, labels = ids[block:], labels[block:]
    return blocks
