"""The embedded broker (`filesystem://`, what `make run` uses): Kombu's filesystem transport, with whole messages.

Kombu's filesystem transport (kombu 5.x, kombu/transport/filesystem.py) writes a message by opening a file under
its final name in the queue folder and then writing it, and reads one by moving the first file of the folder
away and parsing it. Two failures follow, both seen here:
- a reader in another process can take a file between its creation and its last byte, and a writer killed
  mid-write (a worker SIGKILLed while it sent a plan again) leaves a torn file for good;
- the reader's JSON error is raised out of the consumer, and Celery stops the worker ("Unrecoverable error:
  JSONDecodeError"): one torn file takes down every worker that reads it, in turn.

So here a message is written under a name no reader takes (a leading dot) and renamed into place, which POSIX
makes atomic within a folder; and a file that does not parse is logged and skipped. Nothing is lost by skipping
it: a message is only a doorbell (webui/delivery.py), and its plan, still queued, is sent again by the outbox
after PLAN_RESEND_AFTER_S.
"""
from __future__ import annotations

import logging
import os
import uuid
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

logger = logging.getLogger(__name__)


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        """Put `payload` on `queue`: written whole under a hidden name, then renamed to Kombu's own (time-ordered,
        unique) name, so that a reader sees the message whole or not at all."""
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        hidden = os.path.join(self.data_folder_out, f".{name}.part")  # partition('.') never yields "<queue>.msg"
        try:
            with open(hidden, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(hidden, final)
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue: str) -> Any:
        """The next whole message on `queue`; a file that does not parse (torn by a writer that died, or written
        by another program) is logged and skipped instead of stopping the worker."""
        while True:
            try:
                return super()._get(queue)
            except ValueError as exc:  # json.JSONDecodeError; Kombu has already taken the file out of the queue
                logger.warning("filesystem broker: skipped a message on %s that does not parse (%s); its plan is "
                               "sent again by the outbox", queue, exc)


class Transport(filesystem.Transport):
    Channel = Channel


def install() -> None:
    """Make `filesystem://` URLs use this transport, in every process that talks to the broker."""
    TRANSPORT_ALIASES["filesystem"] = f"{__name__}:Transport"
