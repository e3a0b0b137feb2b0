"""From questions to features and back: each question with a window of its context as the model reads it (a
long context gives several windows, DOC_STRIDE tokens apart), the answer's first and last token as the
training labels, and, after evaluation, the start and end logits of every window back to the best answer text
in the context. The fast tokenizer's offset mapping ties tokens to characters both ways."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from worker.qa.squad import Question

# Candidates per window for the answer's start and end (the highest logits), as the SQuAD reference does.
N_BEST = 20


@dataclass
class Features:
    """Unpadded token ids per window; ``starts``/``ends`` for training, ``question_of`` and ``offsets`` (character
    spans of the context tokens, None elsewhere) for turning logits back into answers."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    starts: list[int]
    ends: list[int]
    question_of: list[int]
    offsets: list[list[tuple[int, int] | None]]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.input_ids)


def featurize(tokenizer, questions: Sequence[Question], max_length: int, stride: int) -> Features:
    """Every question's windows. A window that does not hold the whole first answer is labelled with the first
    token ([CLS]): "not in this window", as BERT's SQuAD recipe does."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: the answers' character offsets need "
                         "one (save the model's tokenizer with tokenizer.json)")
    pad_right = tokenizer.padding_side == "right"
    encoded = tokenizer([item.question.lstrip() for item in questions], [item.context for item in questions],
                        truncation="only_second" if pad_right else "only_first", max_length=max_length,
                        stride=min(stride, max_length // 2), return_overflowing_tokens=True,
                        return_offsets_mapping=True, padding=False)
    features = Features([], [] if "token_type_ids" in encoded else None, [], [], [], [])
    context_index = 1 if pad_right else 0
    for window, ids in enumerate(encoded["input_ids"]):
        question = questions[encoded["overflow_to_sample_mapping"][window]]
        sequence = encoded.sequence_ids(window)
        offsets = [span if sequence[position] == context_index else None
                   for position, span in enumerate(encoded["offset_mapping"][window])]
        start, end = _label(offsets, question.starts[0], question.starts[0] + len(question.answers[0]))
        features.input_ids.append(ids)
        if features.token_type_ids is not None:
            features.token_type_ids.append(encoded["token_type_ids"][window])
        features.starts.append(start)
        features.ends.append(end)
        features.question_of.append(encoded["overflow_to_sample_mapping"][window])
        features.offsets.append(offsets)
    return features


def _label(offsets: list[tuple[int, int] | None], first: int, last: int) -> tuple[int, int]:
    """The tokens holding characters ``first``..``last`` (exclusive) of the context; (0, 0) when not all of them
    are in this window."""
    context = [(position, span) for position, span in enumerate(offsets) if span is not None]
    if not context or context[0][1][0] > first or context[-1][1][1] < last:
        return 0, 0
    start = next(position for position, span in context if span[1] > first)
    end = next(position for position, span in reversed(context) if span[0] < last)
    return start, end


def answers(questions: Sequence[Question], features: Features, start_logits: Sequence[np.ndarray],
            end_logits: Sequence[np.ndarray], max_answer_length: int) -> dict[str, str]:
    """Each question's best answer over its windows: the context span whose start and end logits sum highest,
    ending at or after its start and at most ``max_answer_length`` tokens long."""
    best: dict[int, tuple[float, str]] = {}
    windows: dict[int, list[int]] = defaultdict(list)
    for window, question in enumerate(features.question_of):
        windows[question].append(window)
    for question, of_question in windows.items():
        context = questions[question].context
        for window in of_question:
            offsets, starts, ends = features.offsets[window], start_logits[window], end_logits[window]
            length = min(len(offsets), len(starts))
            for start in np.argsort(starts[:length])[::-1][:N_BEST]:
                for end in np.argsort(ends[:length])[::-1][:N_BEST]:
                    if offsets[start] is None or offsets[end] is None or not 0 <= end - start < max_answer_length:
                        continue
                    score = float(starts[start] + ends[end])
                    if question not in best or score > best[question][0]:
                        best[question] = (score, context[offsets[start][0]:offsets[end][1]])
    return {questions[index].id: best.get(index, (0.0, ""))[1] for index in range(len(questions))}
