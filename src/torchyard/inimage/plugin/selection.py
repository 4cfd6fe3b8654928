"""The project's own tests, selected as users select them: the entry's `tests-markers` and `tests-keyword`, read
as pytest reads `-m` and `-k`, over the project's tests alone. torchyard's suites and self-tests are selected
by their own expression, which neither touches."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _pytest.mark import KeywordMatcher, MarkMatcher
from _pytest.mark.expression import Expression

from torchyard.names import PROJECT  # the marker `collection.mark_items` puts on the project's own tests


def _compiled(expression: str, what: str) -> Expression:
    try:
        return Expression.compile(expression)
    except SyntaxError as error:
        raise pytest.UsageError(f"torchyard: {what} {expression!r} is not a pytest expression: {error.msg}") from None


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
