"""The one exception type that reaches users as a single line instead of a traceback."""

import difflib


class PosencError(Exception):
    """A problem the user can fix: the message says what is wrong and how to fix it."""

    def __init__(self, what: str, fix: str | None = None) -> None:
        self.what = what
        self.fix = fix
        super().__init__(f"{what} — {fix}" if fix else what)


class Interrupted(Exception):
    """A clean stop on SIGINT/SIGTERM after the checkpoint was saved; carries the exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class RankFailure(Exception):
    """One rank of a multi-process run failed; ``line`` is what the user sees, ``code`` the
    exit code. Its text carries both through torch's elastic error file to the launcher."""

    def __init__(self, code: int, line: str) -> None:
        super().__init__(f"[exit {code}] {line}")
        self.code = code
        self.line = line


def closest(word: str, choices: list[str]) -> str:
    """' (did you mean X?)' when a choice is close to ``word``, else ''."""
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""
