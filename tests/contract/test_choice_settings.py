"""Every setting that takes one of a few words (STRATEGY, PRECISION, LR_SCHEDULER_TYPE, ATTN_IMPLEMENTATION, ...),
in every built-in program, one table: its default is one of its words, each word is read in any case, and another
word is refused naming the variable and every word it takes."""

from __future__ import annotations

import re

import pytest

from trainer_contract.config_reading import load_config
from trainer_contract.program_settings import PROGRAMS
from trainer_contract.settings import ConfigError, config_fields, variable_choices

# Defaults that mean something to a user of another trainer: TRL's and transformers' own.
KNOWN_DEFAULTS = {"LR_SCHEDULER_TYPE": "linear", "ATTN_IMPLEMENTATION": "auto"}

CASES = [pytest.param(program.config, variable, words, id=f"{program.module}:{variable}")
         for program in PROGRAMS for variable, words in variable_choices(program.config).items()]


@pytest.mark.parametrize(("config_class", "variable", "words"), CASES)
def test_a_choice_setting_reads_its_words_in_any_case_and_refuses_others(config_class, variable, words):
    name = next(item.name for item in config_fields(config_class) if item.metadata["env"] == variable)
    default = getattr(config_class(), name)
    assert default in words and default == KNOWN_DEFAULTS.get(variable, default)
    for word in words:
        assert getattr(load_config({variable: f" {word.upper()} "}, config_class=config_class), name) == word
    with pytest.raises(ConfigError, match=re.escape(f"{variable}: 'nope' must be one of {', '.join(words)}")):
        load_config({variable: "nope"}, config_class=config_class)


def test_the_table_holds_the_settings_users_pick_words_for():
    variables = {case.values[1] for case in CASES}
    assert {"STRATEGY", "PRECISION", "LR_SCHEDULER_TYPE", "ATTN_IMPLEMENTATION"} <= variables
