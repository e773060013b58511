"""A relayed message's attachments, taken up again on the replica that serves its conversation.

Attachments do not travel with a relayed event (bot/cluster.py): only their refs do, and this
replica's adapter, when it can (`surfaces.abilities.RebuildsFiles`), makes each a downloadable
file again. Those it cannot are left behind, and the person is told how many."""

from __future__ import annotations

from dataclasses import replace

from bot.cluster import RelayedEvent
from surfaces.abilities import RebuildsFiles
from surfaces.base import Inbound, IncomingFile

__all__ = ["files_left", "reattach"]


def reattach(
    event: Inbound, relayed: RelayedEvent, rebuilder: RebuildsFiles | None
) -> tuple[Inbound, int]:
    """The event with the files `rebuilder` could take up again, and how many it could not."""
    files: list[IncomingFile] = []
    for ref in relayed.files:
        file = (
            rebuilder.file_from_ref(ref.name, ref.mime, ref.size, ref.kind, ref.ref)
            if ref is not None and rebuilder is not None
            else None
        )
        if isinstance(file, IncomingFile):  # an adapter's answer is checked like any input
            files.append(file)
    return replace(event, files=tuple(files)), len(relayed.files) - len(files)


def files_left(count: int) -> str:
    """What the person is told of the `count` files left behind."""
    if count == 1:
        what, them = "The file attached to your message", "it"
    else:
        what, them = f"The {count} files attached to your message", "them"
    return (
        f"{what} could not be passed to the Switchboard replica serving this conversation; "
        f"send {them} again."
    )
