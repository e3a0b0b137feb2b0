"""docs/metrics.md's table of the live metrics is trainer_contract/metrics.py's, row for row."""

from pathlib import Path

from trainer_contract.metrics import METRICS, PREFIX

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"


def metrics_table() -> str:
    rows = [f"| `{PREFIX}{name}` | {', '.join(f'`{label}`' for label in labels)} | {text} |"
            for name, (text, labels) in METRICS.items()]
    return "\n".join(["| metric | labels | meaning |", "| --- | --- | --- |", *rows]) + "\n"


def test_the_docs_table_is_the_contracts():
    text = DOC.read_text()
    start = text.index("<!-- metrics-table -->\n") + len("<!-- metrics-table -->\n")
    assert text[start:text.index("<!-- /metrics-table -->")] == metrics_table()
