"""The embedded broker's transport (webui/broker.py) on its own: a message is seen whole or not at all, and a file
that does not parse is skipped, not raised out of the consumer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from kombu import Connection
from kombu.transport import resolve_transport

from webui import broker


@pytest.fixture
def channel(tmp_path: Path):
    folders = {name: tmp_path / name for name in ("queue", "processed", "control")}
    for folder in folders.values():
        folder.mkdir()
    options = {"data_folder_in": str(folders["queue"]), "data_folder_out": str(folders["queue"]),
               "processed_folder": str(folders["processed"]), "control_folder": str(folders["control"]),
               "store_processed": False}
    broker.install()
    with Connection("filesystem://localhost//", transport_options=options) as conn:
        assert isinstance(conn.default_channel, broker.Channel)
        yield conn.default_channel, folders["queue"]


def test_filesystem_urls_use_the_safer_transport():
    broker.install()  # webui.celery does this on import; done again here, it changes nothing
    assert resolve_transport("filesystem") is broker.Transport
    with Connection("filesystem://localhost//") as conn:
        assert isinstance(conn.default_channel, broker.Channel)


def test_a_message_is_renamed_into_place_whole(channel, monkeypatch):
    chan, queue = channel
    chan._put("plans", {"body": "one"})
    files = sorted(p.name for p in queue.iterdir())
    assert len(files) == 1 and files[0].endswith(".plans.msg") and not files[0].startswith(".")
    assert json.loads((queue / files[0]).read_text()) == {"body": "one"}
    # A writer that dies before the rename leaves only a hidden file, which no reader takes.
    monkeypatch.setattr(broker.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(Exception, match="Cannot add file"):
        chan._put("plans", {"body": "two"})
    hidden = [p.name for p in queue.iterdir() if p.name.startswith(".")]
    assert len(hidden) == 1 and hidden[0].endswith(".plans.msg.part")
    assert chan._get("plans") == {"body": "one"}


def test_a_file_that_does_not_parse_is_skipped(channel, caplog):
    chan, queue = channel
    (queue / "0000000001_torn.plans.msg").write_bytes(b'{"body": "eyJ')
    chan._put("plans", {"body": "whole"})
    with caplog.at_level("WARNING", logger="webui.broker"):
        assert chan._get("plans") == {"body": "whole"}
    assert "does not parse" in caplog.text
    assert not any(p.name.endswith(".plans.msg") for p in queue.iterdir())
