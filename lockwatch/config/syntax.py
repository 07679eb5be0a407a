"""YAML syntax errors in plain words, with the line to look at.

PyYAML says ``expected <block end>, but found '?'`` and quotes the source line,
which may hold a password. This names the common mistakes instead and never
shows the text of the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import yaml


@dataclass(frozen=True, slots=True)
class _Mistake:
    looks_like: Callable[[yaml.MarkedYAMLError, str], bool]
    words: str
    at_start: bool = False  # the line where the broken construct starts, not where it broke


def _says(context: str | None = None, problem: str = "") -> Callable[..., bool]:
    def looks_like(exc: yaml.MarkedYAMLError, text: str) -> bool:
        return (context is None or exc.context == context) and (exc.problem or "").startswith(
            problem
        )

    return looks_like


def _colon_after_a_value(exc: yaml.MarkedYAMLError, text: str) -> bool:
    """``mapping values are not allowed here`` on a line that already has a ``key:``."""
    mark = exc.problem_mark
    if exc.problem != "mapping values are not allowed here" or mark is None:
        return False
    before = text.splitlines()[mark.line][: mark.column]
    return ": " in before or (before.lstrip().startswith("- ") and ":" in before)


_BLOCK_END = "expected <block end>, but found"
_MISTAKES = (
    _Mistake(_says(problem="found character '\\t'"), "a tab used for indentation (use spaces)"),
    _Mistake(
        _says("while scanning a quoted scalar", "found unexpected end of stream"),
        "an unclosed quote: the value that starts here has no closing quote",
        at_start=True,
    ),
    _Mistake(
        _says(problem="found unknown escape character"),
        "an unknown backslash escape in a double-quoted value (use single quotes, or \\\\)",
    ),
    _Mistake(
        _colon_after_a_value,
        "a ': ' inside a value (put the value in quotes)",
    ),
    _Mistake(
        _says(problem="mapping values are not allowed here"),
        "wrong indentation: this line is indented more than the key it belongs to",
    ),
    _Mistake(_says(problem=f"{_BLOCK_END} '<block mapping start>'"), "wrong indentation"),
    _Mistake(
        _says("while parsing a block mapping", f"{_BLOCK_END} '-'"),
        "a list item where a key was expected (check the indentation)",
    ),
    _Mistake(
        _says("while parsing a block mapping", f"{_BLOCK_END} '<block sequence start>'"),
        "a list item where a key was expected (check the indentation)",
    ),
    _Mistake(
        _says("while parsing a block collection", f"{_BLOCK_END} '?'"),
        "a key: value where a list item was expected (start it with '- ', or indent it)",
    ),
    _Mistake(
        _says(problem=f"{_BLOCK_END} '<scalar>'"),
        "more text after a quoted value (quote the whole value)",
    ),
    _Mistake(
        _says("while parsing a flow sequence"),
        "an unclosed '[': the list that starts here has no ']'",
        at_start=True,
    ),
    _Mistake(
        _says("while parsing a flow mapping"),
        "an unclosed '{': the mapping that starts here has no '}'",
        at_start=True,
    ),
    _Mistake(
        _says("while scanning a simple key", "could not find expected ':'"),
        "a line that is not 'key: value' where a key was expected",
        at_start=True,
    ),
    _Mistake(
        _says(problem="found character"),
        "a value that starts with a character YAML reserves (put the value in quotes)",
    ),
    _Mistake(_says(problem="found undefined alias"), "an alias (*name) to an anchor never defined"),
    _Mistake(_says(problem="second occurrence"), "an anchor (&name) defined twice"),
    _Mistake(_says(problem="but found another document"), "a second document ('---') in the file"),
)


def describe_syntax_error(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """The line to look at and what is wrong there.

    >>> try:
    ...     yaml.compose("targets:\\n  - name: a\\n  dsn: x\\n", Loader=yaml.SafeLoader)
    ... except yaml.YAMLError as exc:
    ...     describe_syntax_error(exc, "targets:\\n  - name: a\\n  dsn: x\\n")
    (3, "a key: value where a list item was expected (start it with '- ', or indent it)")
    """
    if not isinstance(exc, yaml.MarkedYAMLError):
        return None, "the file is not valid YAML"
    mistake = next((m for m in _MISTAKES if m.looks_like(exc, text)), None)
    start, end = exc.context_mark, exc.problem_mark
    mark = (start or end) if mistake is not None and mistake.at_start else (end or start)
    line = None if mark is None else mark.line + 1
    if mistake is not None:
        return line, mistake.words
    # PyYAML's own words, without the snippet of the file its str() would add
    return line, ", ".join(part for part in (exc.context, exc.problem) if part)
