"""The token cache (trainer_runtime.pretrained.token_cache): the splits made once and read back exactly as made; a
cache that fails a check is said and made again, never loaded; another key makes another cache and the newest two
stay; with several ranks, rank 0 makes it while the others wait for its word in the rendezvous' store."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer_runtime.distenv import DistEnv
from trainer_runtime.peer_failures import PeerLost
from trainer_runtime.pretrained import token_cache
from trainer_runtime.pretrained.tables import DatasetError
from trainer_runtime.pretrained.token_cache import Codec, TokenizedSplits, Tokenizing

IGNORE = -100
VOCABULARY = 50
# the shape of worker.sft's examples: token ids and labels (IGNORE or a token)
CODEC = Codec(encode=lambda example: {"input_ids": example[0], "labels": example[1]},
              decode=lambda columns: (columns["input_ids"], columns["labels"]),
              ranges=lambda vocabulary: {"input_ids": (0, vocabulary - 1), "labels": (IGNORE, vocabulary - 1)})
TRAIN = [([1, 2, 3], [IGNORE, 2, 3]), ([], []), ([49], [49]), ([4, 5], [IGNORE, IGNORE])]
EVALUATION = [([7, 8], [IGNORE, 8])]


@dataclass(frozen=True)
class Config:
    output_dir: Path
    tokenize_timeout: float = 30.0


class Maker:
    """A split maker that counts its passes (what tokenizing would cost)."""

    def __init__(self, train=TRAIN, evaluation=EVALUATION):
        self.passes, self.train, self.evaluation = 0, train, evaluation

    def __call__(self) -> TokenizedSplits:
        self.passes += 1
        return TokenizedSplits(self.train, self.evaluation, {"evaluation_split": "validation"})


def tokenized(tmp_path, key="k1", make=None, said=None, env=DistEnv(), store=None) -> TokenizedSplits:
    tokenizing = Tokenizing(Config(tmp_path), env, store, key, (said if said is not None else []).append)
    return tokenizing.tokenized(CODEC, VOCABULARY, make or Maker())


def test_the_splits_are_made_once_and_read_back_exactly_as_made(tmp_path):
    make, said = Maker(), []
    first = tokenized(tmp_path, make=make, said=said)
    again = tokenized(tmp_path, make=make, said=said)
    assert make.passes == 1
    for got in (first, again):
        assert list(got.train) == TRAIN and list(got.evaluation) == EVALUATION
        assert got.facts == {"evaluation_split": "validation"}
        assert got.train[-1] == TRAIN[-1] and got.train[1:3] == TRAIN[1:3]
    assert said[0].startswith("tokenized 4 training and 1 evaluation examples in ")
    assert said[1].startswith(f"the tokenized data is read from {tmp_path / 'token-cache' / 'k1'} (4 training")


def test_another_key_makes_another_cache_and_the_newest_two_stay(tmp_path):
    make = Maker()
    for key in ("k1", "k2", "k3"):
        tokenized(tmp_path, key, make)
    assert make.passes == 3
    assert sorted(path.name for path in (tmp_path / "token-cache").iterdir()) == ["k2", "k3"]


def _rewrite(path: Path, dtype, change) -> None:
    values = np.fromfile(path, dtype=dtype)
    change(values)
    values.tofile(path)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-4])


DAMAGES = {
    "a token file cut short": (lambda d: _truncate(d / "train-input_ids.tokens"), "is 20 bytes, the manifest says 24"),
    "a token id beyond the vocabulary": (
        lambda d: _rewrite(d / "train-input_ids.tokens", np.int32, lambda v: v.__setitem__(0, VOCABULARY)),
        "train-input_ids holds values outside 0..49"),
    "a negative token id": (
        lambda d: _rewrite(d / "evaluation-input_ids.tokens", np.int32, lambda v: v.__setitem__(0, IGNORE)),
        "evaluation-input_ids holds values outside 0..49"),
    "a label that is neither IGNORE nor a token": (
        lambda d: _rewrite(d / "train-labels.tokens", np.int32, lambda v: v.__setitem__(0, -5)),
        "train-labels holds values outside -100 and 0..49"),
    "offsets out of order": (
        lambda d: _rewrite(d / "train-labels.offsets", np.int64, lambda v: v.__setitem__(1, 6)),
        "train-labels.offsets are out of order"),
    "a manifest of another format": (
        lambda d: (d / "manifest.json").write_text(json.dumps({**json.loads((d / "manifest.json").read_text()),
                                                                "format": 99})),
        "manifest.json is of another format or key"),
    "a manifest that is not JSON": (lambda d: (d / "manifest.json").write_text("{"), "Expecting property name"),
    "a manifest of a megabyte": (lambda d: (d / "manifest.json").write_text(" " * (1 << 20 | 1)),
                                 "manifest.json is over 1048576 bytes"),
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_cache_that_fails_a_check_is_said_and_made_again_never_loaded(tmp_path, damage):
    make, said = Maker(), []
    tokenized(tmp_path, make=make)
    harm, reason = damage
    harm(tmp_path / "token-cache" / "k1")
    got = tokenized(tmp_path, make=make, said=said)
    assert make.passes == 2 and list(got.train) == TRAIN
    assert said[0].startswith(f"the tokenized data in {tmp_path / 'token-cache' / 'k1'} is unusable (")
    assert reason in said[0] and said[0].endswith("): tokenizing again")
    assert list(tokenized(tmp_path, make=make).train) == TRAIN and make.passes == 2  # the new one is whole


def _two_ranks(tmp_path, make, key="k1") -> tuple[list, list, list]:
    """Rank 0 and rank 1 of one gang, in two threads sharing a store; each one's result (or error) and lines."""
    import torch.distributed as dist

    store, results, said = dist.HashStore(), [None, None], [[], []]

    def rank(number: int) -> None:
        env = DistEnv(rank=number, local_rank=number, world_size=2, local_world_size=2)
        try:
            results[number] = tokenized(tmp_path, key, make, said[number], env, store)
        except Exception as error:  # noqa: BLE001 - the test looks at it
            results[number] = error

    threads = [threading.Thread(target=rank, args=(number,)) for number in (1, 0)]  # the waiting rank first
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results, said[0], said[1]


def test_with_several_ranks_rank_0_makes_it_and_the_others_read_what_it_wrote(tmp_path):
    make = Maker()
    (zero, one), said0, said1 = _two_ranks(tmp_path, make)
    assert make.passes == 1
    assert isinstance(one, TokenizedSplits) and list(one.train) == TRAIN and list(one.evaluation) == EVALUATION
    assert isinstance(zero, TokenizedSplits) and list(zero.train) == TRAIN
    assert said0[0].startswith("tokenized 4 training") and said1 == []
    (zero, one), _, _ = _two_ranks(tmp_path, make)  # a restart
    assert make.passes == 1 and list(one.train) == TRAIN


def test_a_preparer_that_cannot_tokenize_refuses_and_its_peers_are_its_victims(tmp_path):
    def refused() -> TokenizedSplits:
        raise DatasetError("MESSAGES_COLUMN: no such column")

    (zero, one), _, _ = _two_ranks(tmp_path, refused)
    assert isinstance(zero, DatasetError)
    assert isinstance(one, PeerLost) and "rank 0 could not tokenize the data: MESSAGES_COLUMN" in str(one)
    assert not (tmp_path / "token-cache" / "k1").exists()


def test_the_key_follows_what_the_examples_depend_on_and_not_the_world_size(tmp_path):
    @dataclass(frozen=True)
    class Settings:
        eval_files: tuple = ()
        eval_samples: int = 0

    record = {"tokenizer_revision": "t", "data_revision": "d", "content_revisions": {}, "world_size": 2,
              "model_revision": "m", "config": {"max_seq_length": 16}}
    key = token_cache.key_of(record, Settings())
    assert token_cache.key_of({**record, "world_size": 4}, Settings()) == key
    for changed, settings_ in (({"tokenizer_revision": "u"}, Settings()), ({"data_revision": "e"}, Settings()),
                               ({"config": {"max_seq_length": 32}}, Settings()),
                               ({"content_revisions": {"chat_template_path": "x"}}, Settings()),
                               ({}, Settings(eval_samples=5)), ({}, Settings(eval_files=("v.jsonl",)))):
        assert token_cache.key_of({**record, **changed}, settings_) != key, (changed, settings_)



def test_a_record_without_the_data_keys_by_the_data_sets_files(tmp_path):
    """worker.finetune's checkpoints do not record the data (a resume on other data is allowed): its cache is still
    keyed by the data set's files, so other data is tokenized again, never read from the old data's cache."""
    @dataclass(frozen=True)
    class Settings:
        dataset_dir: Path

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\ngood,1\n")
    record = {"tokenizer_revision": "t", "content_revisions": {}, "config": {}}
    key = token_cache.key_of(record, Settings(data))
    assert token_cache.key_of(record, Settings(data)) == key
    (data / "train.csv").write_text("text,label\nbad,0\n")
    assert token_cache.key_of(record, Settings(data)) != key


tokens = st.lists(st.integers(0, VOCABULARY - 1), max_size=12)
examples = st.lists(tokens.flatmap(lambda ids: st.tuples(
    st.just(ids), st.lists(st.sampled_from([IGNORE, *range(VOCABULARY)]), min_size=len(ids), max_size=len(ids)))),
    max_size=20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(train=examples, evaluation=examples)
def test_any_examples_read_back_as_written(tmp_path_factory, train, evaluation):
    directory = tmp_path_factory.mktemp("cache")
    cache = token_cache.TokenCache(directory, "k", CODEC, VOCABULARY)
    cache.write(TokenizedSplits(train, evaluation, {"n": len(train)}))
    got = cache.read(pytest.fail)
    assert got is not None and list(got.train) == train and list(got.evaluation) == evaluation
    assert got.facts == {"n": len(train)}


def test_a_volume_that_cannot_keep_the_cache_trains_on_what_was_made_and_says_so(tmp_path):
    (tmp_path / "token-cache").write_text("a file where the cache's directory goes")  # mkdir fails as on a full volume
    make, said = Maker(), []
    got = tokenized(tmp_path, make=make, said=said)
    assert list(got.train) == TRAIN and make.passes == 1
    assert said[0].startswith(f"the tokenized data could not be kept in {tmp_path / 'token-cache' / 'k1'} (")
    assert said[0].endswith("training on it without a cache (a restart tokenizes again)")
    assert [path.name for path in tmp_path.iterdir()] == ["token-cache"]  # no temporary left
