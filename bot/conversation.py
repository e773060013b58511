"""A conversation and what it is bound to on the agent side."""

from __future__ import annotations

from dataclasses import dataclass, replace

from surfaces.base import ConversationKey

__all__ = ["Binding", "ConversationKey"]


@dataclass(frozen=True, slots=True)
class Binding:
    """The agent session a conversation continues. `generation` counts fresh starts (/new), so a
    late event of an older session can be told apart. `project` and `agent` name where it works
    ("" in a binding written before projects existed: the conversation's place or default)."""

    session_id: str
    backend: str
    workspace: str
    model: str = ""
    generation: int = 0
    project: str = ""
    agent: str = ""

    def with_model(self, model: str) -> Binding:
        return replace(self, model=model)
