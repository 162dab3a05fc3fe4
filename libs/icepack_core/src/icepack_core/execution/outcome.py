"""What an action failure means for the queue."""

from __future__ import annotations

from icepack_core.errors import IcepackError


class ActionError(IcepackError):
    """An action failed; ``retryable`` tells the queue whether to try the job again."""

    code = "ACTION_FAILED"

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable
