"""Why a definition was refused: every problem, with the field and the line that hold it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from veritask.core.errors import VeritaskError


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a definition.

    ``field`` is a path such as ``tasks.load.after[0]`` or ``schedule.cron`` (empty for the
    document as a whole); ``line`` is 1-based, or None when the definition did not come from
    text (a JSON object from the ledger) or the problem has no place of its own.
    """

    field: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        name = f"{self.field}: " if self.field else ""
        return f"{where}{name}{self.message}"


class DefinitionError(VeritaskError, ValueError):
    """The definition was refused; ``problems`` lists every reason found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = sorted(problems, key=_order)
        count = len(self.problems)
        head = "1 problem" if count == 1 else f"{count} problems"
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"the definition was refused, {head}:\n{lines}")

    @classmethod
    def one(cls, field: str, message: str, line: int | None = None) -> DefinitionError:
        """A refusal with a single problem."""
        return cls([Problem(field, line, message)])


def _order(problem: Problem) -> tuple[int, str, str]:
    return (problem.line if problem.line is not None else 0, problem.field, problem.message)
