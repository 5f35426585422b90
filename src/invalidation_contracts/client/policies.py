"""Which policy governs an origin: the memory's strategy, or a contract-less policy chosen for it.

An origin is governed by a contract-less policy (``client.contractless``) once one is chosen for
it: explicitly (``FixMemory.set_policy``), automatically (the memory's ``contractless`` policy,
when a failure from the origin carries suggestions and no contract field at all), or because the
memory's own strategy is one. The choice is kept in ``OriginState.policy`` (persisted) and
announced by a ``PolicyChosen`` event; only the policy hooks (``Strategy.serves``,
``on_refuted``, ...) are dispatched by it: an origin that sends no contract gives the contract
strategy nothing to act on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..protocol.models import Suggestion
from .contractless import ContractlessPolicy
from .events import PolicyChosen
from .shared.ledger import Ledger
from .strategies import Strategy, strategy_for
from .wire import carries_contract


def contractless_policy(spec: str | Strategy | type[Strategy]) -> ContractlessPolicy:
    """A contract-less policy from its name or arm code (``learned``, ``A1L``) or an instance."""
    policy = strategy_for(spec)
    if not isinstance(policy, ContractlessPolicy):
        raise ValueError(f"{policy.name} ({policy.arm}) is not a contract-less policy")
    return policy


class Policies:
    """The strategy whose policy hooks apply to each origin."""

    def __init__(self, strategy: Strategy, automatic: ContractlessPolicy | None = None) -> None:
        self.strategy = strategy
        self.automatic = automatic
        self._named: dict[str, ContractlessPolicy] = {}
        for policy in (strategy, automatic):
            if isinstance(policy, ContractlessPolicy):
                self._named[policy.name] = policy

    def of(self, tx: Ledger) -> Strategy:
        """The strategy governing the call's origin."""
        name = tx.state.policy
        if name is None:
            return self.strategy
        policy = self._named.get(name)
        if policy is None:
            policy = self._named[name] = contractless_policy(name)
        return policy

    def choose(self, tx: Ledger, policy: str | Strategy, reason: str) -> None:
        """Govern the origin by ``policy`` from now on (an event if that is a change)."""
        chosen = contractless_policy(policy)
        self._named.setdefault(chosen.name, chosen)
        if tx.state.policy == chosen.name:
            return
        tx.state.policy = chosen.name
        tx.emit(
            PolicyChosen(origin=tx.origin, episode=tx.episode, policy=chosen.name, reason=reason)
        )

    def notice(
        self, tx: Ledger, body: Mapping[str, Any], suggestions: Sequence[Suggestion]
    ) -> None:
        """A failure arrived: if no policy governs the origin yet, choose one when the memory's
        strategy is contract-less, or automatically when the failure speaks no contract."""
        if tx.state.policy is not None or not suggestions:
            return
        if isinstance(self.strategy, ContractlessPolicy):
            self.choose(tx, self.strategy, "the memory's strategy")
        elif (
            self.automatic is not None
            and not carries_contract(body)
            and all(s.cache_hint is None for s in suggestions)
        ):
            self.choose(tx, self.automatic, "automatic: suggestions without any contract field")
