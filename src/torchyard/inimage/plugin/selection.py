"""The project's own tests, selected as users select them: the entry's `tests-markers` and `tests-keyword`, read
as pytest reads `-m` and `-k`, over the project's tests alone. torchyard's suites and self-tests are selected
by their own expression, which neither touches."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _pytest.mark import KeywordMatcher, MarkMatcher
from _pytest.mark import expression as expression_module
from _pytest.mark.expression import Expression

from torchyard.names import PROJECT  # the marker `collection.mark_items` puts on the project's own tests

# What an expression pytest cannot read raises: its own ParseError up to pytest 8, a SyntaxError since.
UNREADABLE = (SyntaxError, *(klass for klass in (getattr(expression_module, "ParseError", None),) if klass))


def _compiled(expression: str, what: str) -> Expression:
    try:
        return Expression.compile(expression)
    except UNREADABLE as error:
        why = getattr(error, "msg", None) or getattr(error, "message", None) or str(error)
        raise pytest.UsageError(f"torchyard: {what} {expression!r} is not a pytest expression: {why}") from None


def check_expressions(markers: str, keyword: str) -> None:
    """Stop the run in one line, with pytest's usage error, where either expression cannot be read: checked at
    configuration, since pytest 8 makes a usage error raised during collection an internal error."""
    try:
        for expression, what in ((markers, "marker"), (keyword, "keyword")):
            if expression.strip():
                _compiled(expression, f"the project tests' {what} expression")
    except pytest.UsageError as error:
        pytest.exit(str(error), returncode=pytest.ExitCode.USAGE_ERROR)


def _markers(item: pytest.Item) -> Callable[..., bool]:
    marks = list(item.iter_markers())
    if hasattr(MarkMatcher, "from_markers"):  # pytest 8.2 and later
        return MarkMatcher.from_markers(marks)
    return MarkMatcher.from_item(item)  # type: ignore[attr-defined,no-any-return]


def select_project_tests(config: pytest.Config, items: list[pytest.Item], markers: str, keyword: str) -> None:
    """Deselect the project's tests that `markers` or `keyword` leave out."""
    by_marker = _compiled(markers, "the project tests' marker expression") if markers.strip() else None
    by_keyword = _compiled(keyword, "the project tests' keyword expression") if keyword.strip() else None
    if by_marker is None and by_keyword is None:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        chosen = item.get_closest_marker(PROJECT) is None or (
            (by_marker is None or by_marker.evaluate(_markers(item)))
            and (by_keyword is None or by_keyword.evaluate(KeywordMatcher.from_item(item)))
        )
        (kept if chosen else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
