"""Reading values: files, layering, --set typing and key paths."""

import pytest

from generator.errors import ValuesError
from generator.values import apply_set, layer_values, load_values_file, parse_values_text, split_key_path


def test_layering_merges_mappings_and_replaces_other_values_and_lists():
    base = {"resources": {"cpu": 2, "gpu": {"accelerator_count": 0}}, "entrypoint": {"args": ["a"]}}
    override = {"resources": {"gpu": {"accelerator_count": 4}}, "entrypoint": {"args": ["b"]}}
    merged = layer_values(base, override, "team.yaml")
    assert merged == {"resources": {"cpu": 2, "gpu": {"accelerator_count": 4}}, "entrypoint": {"args": ["b"]}}
    assert base["resources"]["gpu"]["accelerator_count"] == 0  # inputs are not modified


@pytest.mark.parametrize(
    "raw, expected",
    [("4", 4), ("0.5", 0.5), ("true", True), ("0755", 493), ("[a, b]", ["a", "b"]), ("text", "text"), ("", ""),
     ("a: b: c", "a: b: c")],
)
def test_set_values_are_typed_as_yaml(raw, expected):
    assert apply_set({}, f"key={raw}", as_string=False) == {"key": expected}


def test_set_string_keeps_text_that_looks_like_a_number():
    assert apply_set({}, "config_map.SEED=0042", as_string=True) == {"config_map": {"SEED": "0042"}}


def test_escaped_dots_stay_inside_a_key():
    assert split_key_path(r"labels.team\.example\.com/owner") == ["labels", "team.example.com/owner"]
    assert apply_set({"labels": {}}, r"labels.a\.b=c", as_string=False) == {"labels": {"a.b": "c"}}


@pytest.mark.parametrize("assignment", ["replicas", "=3", "a..b=1", ".a=1"])
def test_malformed_set_is_refused(assignment):
    with pytest.raises(ValuesError, match="expected KEY=VALUE"):
        apply_set({}, assignment, as_string=False)


def test_set_through_a_scalar_names_the_path():
    with pytest.raises(ValuesError, match=r"replicas is an integer, not a mapping"):
        apply_set({"replicas": 2}, "replicas.x=1", as_string=False)


def test_duplicate_keys_are_refused_with_their_line():
    with pytest.raises(ValuesError, match=r"line 2.*duplicate key 'replicas'"):
        parse_values_text("replicas: 2\nreplicas: 3\n", "v.yaml")


def test_alias_bomb_is_refused_quickly():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefghi":
        prev = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
    with pytest.raises(ValuesError, match="alias bomb"):
        parse_values_text(bomb, "bomb.yaml")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe binary", "not UTF-8 text (byte 0xff at offset 0)"),
        (b"replicas: 2\x00", "contains NUL bytes"),
        (b"- a\n- b\n", "the top level must be a mapping"),
        (b"a: 1\n---\nb: 2\n", "holds 2 YAML documents"),
        (b"replicas: [\n", "not valid YAML"),
    ],
)
def test_unreadable_files_are_refused(tmp_path, content, message):
    path = tmp_path / "values.yaml"
    path.write_bytes(content)
    with pytest.raises(ValuesError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_values_file(path)


def test_oversized_file_is_refused_without_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"# " + b"x" * (5 * 1024 * 1024) + b"\n")
    with pytest.raises(ValuesError, match="larger than 4 MiB"):
        load_values_file(path)


def test_empty_file_means_no_overrides(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_values_file(path) == {}


def test_json_files_decode_escaped_emoji_as_json_does(tmp_path):
    """json.dumps writes an emoji as a surrogate-pair escape; YAML parsers reject or corrupt it, json does not."""
    path = tmp_path / "values.json"
    path.write_text('{"annotations": {"owner": "\\ud83d\\ude42 ada"}}')
    assert load_values_file(path) == {"annotations": {"owner": "\U0001f642 ada"}}


def test_duplicate_keys_in_json_are_refused(tmp_path):
    path = tmp_path / "values.json"
    path.write_text('{"replicas": 2, "replicas": 3}')
    with pytest.raises(ValuesError, match="duplicate key 'replicas'"):
        load_values_file(path)


def test_a_hyperparameters_file_sets_config_map_by_its_names_in_capitals(tmp_path):
    from tests.generator.helpers import run_main

    (tmp_path / "config.yaml").write_text("batch_size: 8\nlearning_rate: 5.0e-5\nprecision: bf16\n")
    values = tmp_path / "values.yaml"
    values.write_text("entrypoint: {module: worker.finetune}\nhyperparameters_file: config.yaml\n")
    result = run_main("--values", str(values), "--set", "config_map.EPOCHS=2")
    assert result.exit_code == 0, result.output
    for line in ('"BATCH_SIZE": "8"', '"LEARNING_RATE": "5e-05"', '"PRECISION": "bf16"', '"EPOCHS": "2"'):
        assert line in result.stdout


@pytest.mark.parametrize(("config", "values", "message"), [
    ("batch_sze: 8\n", "", "config_map.BATCH_SZE: not a variable of python -m worker.finetune (did you mean "
                           "'BATCH_SIZE'?)"),
    ("batch_size: 8\n", "config_map: {BATCH_SIZE: '4'}\n", "values.yaml: config_map.BATCH_SIZE is also set by "),
    ("layers: [1, 2]\n", "", "config.yaml: layers: each hyper-parameter must be a name (letters, digits, '_') with a "
                             "single value, not a list"),
    (None, "", "config.yaml: cannot read"),
])
def test_a_bad_hyperparameters_file_is_refused_naming_the_file_and_key(tmp_path, config, values, message):
    from tests.generator.helpers import run_main

    if config is not None:
        (tmp_path / "config.yaml").write_text(config)
    path = tmp_path / "values.yaml"
    path.write_text("entrypoint: {module: worker.finetune}\nhyperparameters_file: config.yaml\n" + values)
    result = run_main("--values", str(path))
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert message in result.stderr


def test_a_hyperparameters_file_given_by_set_is_refused_naming_the_key():
    """The schema lists hyperparameters_file (its table, editors' checks), but only a values file can name one:
    it is read relative to that file, before --set applies."""
    from tests.generator.helpers import run_main

    result = run_main("--set", "hyperparameters_file=config.yaml")
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "hyperparameters_file: name it in a values file (--values), relative to that file" in result.stderr


@pytest.mark.parametrize("named", ["{outside}/config.yaml", "../outside/config.yaml", "link/config.yaml",
                                   "linked.yaml"])
def test_a_hyperparameters_file_out_of_the_values_files_directory_is_refused(tmp_path, named):
    """A values file passed around must not read any YAML of the rendering machine into the ConfigMap: an absolute
    path, '..' and a link out of the values file's directory are refused before anything is read."""
    from tests.generator.helpers import run_main

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.yaml").write_text("aws_secret_access_key: planted\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "link").symlink_to(outside)
    (project / "linked.yaml").symlink_to(outside / "config.yaml")
    values = project / "values.yaml"
    values.write_text("entrypoint: {module: worker.finetune}\n"
                      f"hyperparameters_file: {named.format(outside=outside)}\n")
    result = run_main("--values", str(values))
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "hyperparameters_file" in result.stderr and "planted" not in result.stderr
    assert ("is an absolute path" if named.startswith("{") else "leads out of") in result.stderr


def test_a_hyperparameters_file_below_the_values_file_is_read_and_its_credentials_refused(tmp_path):
    """A file in a folder under the values file is fine; a credential in it is refused like one in config_map."""
    from tests.generator.helpers import run_main

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "config.yaml").write_text("batch_size: 8\nhf_token: hf_planted\n")
    values = tmp_path / "values.yaml"
    values.write_text("entrypoint: {module: worker.finetune}\nhyperparameters_file: configs/../configs/config.yaml\n")
    result = run_main("--values", str(values))
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "config_map.HF_TOKEN: credentials come from a Secret only" in result.stderr
    assert "hf_planted" not in result.stderr
