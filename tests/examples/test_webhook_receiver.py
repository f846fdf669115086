"""The webhook receiver of the decisions guide (examples/webhook_receiver.py, shown whole in
docs/guide/decisions.md): a signed delivery is acted on once, however often it comes; an
unsigned or wrongly signed one gets 401."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from modelcompare.service.webhooks.signing import new_secret, sign

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "webhook_receiver.py"
EVENT = {"id": "c:7:promote", "comparison": "c", "rule": "promote", "kind": "fired",
         "figures": {"value": 4.1}}


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleType, str, str]]:
    secret = new_secret()
    monkeypatch.setenv("MODELCOMPARE_WEBHOOK_SECRET", secret)
    spec = importlib.util.spec_from_file_location("webhook_receiver", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = ThreadingHTTPServer(("127.0.0.1", 0), module.Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield module, secret, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_a_signed_event_is_acted_on_once(receiver: tuple[ModuleType, str, str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    module, secret, url = receiver
    body = json.dumps({"type": "event", "event": EVENT}).encode()
    for _ in range(2):  # the same delivery twice
        response = httpx.post(url, content=body,
                              headers={"Modelcompare-Signature": sign(secret, body)})
        assert response.status_code == 204
    assert module.seen == {"c:7:promote"}
    assert capsys.readouterr().out.count("promote the challenger") == 1


def test_a_delivery_not_signed_with_the_secret_is_refused(
        receiver: tuple[ModuleType, str, str]) -> None:
    module, _, url = receiver
    body = json.dumps({"type": "event", "event": EVENT}).encode()
    for headers in ({}, {"Modelcompare-Signature": sign(new_secret(), body)}):
        assert httpx.post(url, content=body, headers=headers).status_code == 401
    assert module.seen == set()


def test_the_guide_shows_the_example_whole() -> None:
    guide = (ROOT / "docs" / "guide" / "decisions.md").read_text()
    assert f"```python\n{EXAMPLE.read_text()}```" in guide
