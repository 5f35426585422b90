"""Provider faults: a policy that breaks the policy API is a bug in the provider, not bad input.

The sans-IO core raises ``PolicyError`` naming the policy and, where one is involved, the table or
field; the HTTP edge answers it with a ``500 internal-error`` problem document and logs the message.
"""

from __future__ import annotations

__all__ = ["PolicyError"]


class PolicyError(Exception):
    """A policy read a table the registry does not hold, returned something that is not a
    violation, or suggested a parameter that is not a field of its route's request."""

    def __init__(
        self,
        reason: str,
        *,
        policy: str | None = None,
        table: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.policy = policy
        self.table = table
        self.field = field

    def __str__(self) -> str:
        who = f"policy {self.policy!r}" if self.policy is not None else "a policy"
        return f"{who} {self.reason}"
