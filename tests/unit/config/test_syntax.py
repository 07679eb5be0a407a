"""YAML syntax errors read like a person wrote them: the line, and the mistake
in plain words, never PyYAML's parser states nor the text of the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockwatch.config.load import ConfigError, load_settings

SECRET = "s3cret-in-the-file"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (
            f"targets:\n  - name: a\n    dsn: password={SECRET}\n   interval: 5s\n",
            4,
            "wrong indentation",
        ),
        (
            f"targets:\n  - name: a\n      dsn: password={SECRET}\n",
            3,
            "wrong indentation: this line is indented more than the key it belongs to",
        ),
        (
            f"targets:\n  - name: a\n    dsn: password={SECRET}\n    - interval: 5s\n",
            4,
            "a list item where a key was expected",
        ),
        (
            f"targets:\n  - name: a\n  dsn: password={SECRET}\n",
            3,
            "a key: value where a list item was expected",
        ),
        (
            f'targets:\n  - name: "a\n    dsn: password={SECRET}\n',
            2,
            "an unclosed quote",
        ),
        (
            f"targets:\n  - name: a\n\t  dsn: password={SECRET}\n",
            3,
            "a tab used for indentation",
        ),
        (
            f"targets:\n  - name: a: b\n    dsn: password={SECRET}\n",
            2,
            "a ': ' inside a value (put the value in quotes)",
        ),
        (
            f"targets:\n  - name: [a\n    dsn: password={SECRET}\n",
            2,
            "an unclosed '['",
        ),
        (
            f"targets:\n  - name: a\n    dsn\n    interval: password={SECRET}\n",
            3,
            "a line that is not 'key: value'",
        ),
        (f"listen: @{SECRET}\n", 1, "a value that starts with a character YAML reserves"),
        ("targets:\n  - *base\n", 2, "an alias (*name) to an anchor never defined"),
    ],
)
def test_a_yaml_mistake_is_named_in_plain_words_at_its_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = tmp_path / "lockwatch.yml"
    path.write_text(text)

    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})

    (problem,) = caught.value.problems
    assert (problem.path, problem.line) == ("", line)
    assert problem.message.startswith(f"YAML syntax error: {words}")
    for jargon in (SECRET, "<block", "expected <", "scanning", "parsing", "password"):
        assert jargon not in str(problem)
