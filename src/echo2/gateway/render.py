"""A chat call's prompt ids: the tokens the model already holds wherever the conversation extends them.

An agent's harness sends the whole conversation with every call, the model's earlier replies as
text. Rendering it afresh and encoding the text need not give the ids the model sampled (a
byte-level BPE merges a reply's last characters with the template's next ones differently), so
the gateway keeps, per episode, every conversation it answered with the ids that answer ended
on (:class:`Held`). A call whose messages begin with one of them gets those ids, then only the
template's text for the new messages encoded (:meth:`echo2.tasks.chat.ChatPrompt.continuation`,
the rule episodes use). A call that extends none (its first call, a rewritten history; or any
call, under a template that renders earlier turns differently once later ones follow) is the
template's rendering encoded: :mod:`.trajectory` then starts a segment of its own for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from echo2.tasks.chat import ChatPrompt

Message = dict[str, str]


@dataclass(frozen=True)
class Held:
    """A conversation the gateway answered, its answer last, and the ids it ended on."""

    messages: list[Message]
    ids: list[int]
    """The call's prompt ids and completion ids (the end-of-turn token included)."""
    ended: bool
    """The completion ended on the end-of-turn token (one cut off by its budget does not continue:
    the template would close the turn the model never closed)."""
    tools: list[dict] | None = None
    """The tool schemas the template described (a template with a tool format of its own)."""


def prompt_ids(chat: ChatPrompt, encode: Callable[[str], list[int]], messages: list[Message],
               held: Sequence[Held], tools: list[dict] | None = None) -> list[int]:
    """The prompt of a call of ``messages`` (``tools`` for the template to describe): the longest
    ``held`` conversation they extend with the same tools, its ids kept, the rest of the template's
    text encoded; else the whole rendering encoded."""
    extended = [h for h in held if h.ended and h.tools == tools and len(h.messages) < len(messages)
                and messages[: len(h.messages)] == h.messages]
    if extended:
        longest = max(extended, key=lambda h: len(h.messages))
        try:
            return longest.ids + encode(chat.continuation(longest.messages, messages[len(longest.messages):], tools))
        except ValueError:  # a template that rewrites earlier turns: nothing extends, a segment of its own
            pass
    return encode(chat.render_messages(messages, tools))
