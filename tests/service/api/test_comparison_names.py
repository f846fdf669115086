"""A comparison's name and seed: the documented charset and range, 422 otherwise, nothing
stored."""

from __future__ import annotations

import pytest
from service_helpers import assert_error
from service_server import StartServer

MODELS = [{"name": "a", "family": "beta_bernoulli"}]
REFUSED_NAMES = ["a\x00b", "invoice\u202efdp.exe", "a/b", "a\\b", " padded", "padded ",
                 "line\nbreak", "zero\u200bwidth", "tag\U000e0041"]


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_unprintable_and_path_like_names_are_refused(name: str, start_server: StartServer
                                                     ) -> None:
    server = start_server("local")
    with server.client() as client:
        response = client.post("/v1/comparisons", json={"name": name, "models": MODELS})
        assert_error(response, 422)
        assert "printable" in response.json()["error"]["message"]
        assert list(server.redis().scan_iter(match=f"{server.settings.key_prefix}:*")) == []


def test_printable_unicode_names_and_64_bit_seeds_are_accepted(start_server: StartServer
                                                              ) -> None:
    server = start_server("local")
    with server.client() as client:
        for name, seed in (("modèle de prix 2026", 0), ("数据", 2**64 - 1), ("..", 7)):
            created = client.post("/v1/comparisons",
                                  json={"name": name, "seed": seed, "models": MODELS})
            assert created.status_code == 201, created.text
            assert (created.json()["name"], created.json()["seed"]) == (name, seed)
        for seed in (-1, 2**64, 10**400):
            assert_error(client.post("/v1/comparisons",
                                     json={"name": "s", "seed": seed, "models": MODELS}), 422)
