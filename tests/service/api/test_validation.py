"""Every bad request gets a 4xx JSON error body and changes nothing in Redis."""

from __future__ import annotations

from typing import Any

from service_helpers import assert_error, comparison_body
from service_server import StartServer, snapshot

BAD_CHUNKS: list[tuple[str, Any, int, str]] = [
    ("ragged rows", {"x": [[1, 2, 3, 4], [1, 2, 3]], "y": [1, 2]}, 422, "invalid_chunk"),
    ("too few columns", {"x": [[1, 2, 3]], "y": [1]}, 422, "invalid_chunk"),
    ("too many columns", {"x": [[1, 2, 3, 4, 5]], "y": [1]}, 422, "invalid_chunk"),
    ("NaN", '{"x": [[1, 2, NaN, 4]], "y": [1]}', 422, "invalid_chunk"),
    ("infinity", '{"x": [[1, 2, 3, 4]], "y": [Infinity]}', 422, "invalid_chunk"),
    ("null value", {"x": [[1, 2, None, 4]], "y": [1]}, 422, "invalid_chunk"),
    ("string value", {"x": [[1, 2, "a", 4]], "y": [1]}, 422, "invalid_chunk"),
    ("empty chunk", {"x": [], "y": []}, 422, "invalid_chunk"),
    ("row count mismatch", {"x": [[1, 2, 3, 4]], "y": [1, 2]}, 422, "invalid_chunk"),
    ("missing y", {"x": [[1, 2, 3, 4]]}, 422, "invalid_chunk"),
    ("missing x", {"y": [1.0]}, 422, "invalid_chunk"),
    ("y is a matrix", {"x": [[1, 2, 3, 4]], "y": [[1]]}, 422, "invalid_chunk"),
    ("unknown field", {"x": [[1, 2, 3, 4]], "y": [1], "z": 1}, 422, "invalid_chunk"),
    ("not an object", [1, 2], 422, "invalid_chunk"),
    ("not JSON", "{x: 1", 422, "invalid_chunk"),
    ("too many rows", {"x": [[0, 0, 0, 0]] * 6, "y": [0] * 6}, 413, "too_large"),
    ("empty object", {}, 422, "invalid_chunk"),
    ("null body", "null", 422, "invalid_chunk"),
    ("rows without columns", {"x": [[]], "y": [1]}, 422, "invalid_chunk"),
    ("numeric string", {"x": [[1, 2, 3, 4]], "y": ["1.5"]}, 422, "invalid_chunk"),
    ("booleans", {"x": [[1, 2, 3, 4]], "y": [True]}, 422, "invalid_chunk"),
    ("integer beyond float64", '{"x": [[1, 2, 3, 4]], "y": [1' + "0" * 400 + "]}", 422,
     "invalid_chunk"),
    ("1e300", {"x": [[1e300, 2, 3, 4]], "y": [1]}, 422, "invalid_chunk"),
    ("-1e101", {"x": [[1, 2, 3, 4]], "y": [-1e101]}, 422, "invalid_chunk"),
    ("x is a scalar", {"x": 3, "y": [1]}, 422, "invalid_chunk"),
    ("x nested deeper", {"x": [[[1, 2, 3, 4]]], "y": [1]}, 422, "invalid_chunk"),
    ("deeply nested", '{"x": ' + "[" * 1900 + "]" * 1900 + "}", 422, "invalid_chunk"),
]


def test_bad_chunks_are_rejected_and_change_nothing(start_server: StartServer) -> None:
    server = start_server("local", max_rows=5, max_body_bytes=4000)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        before = snapshot(server, cid)
        for label, body, status, code in BAD_CHUNKS:
            if isinstance(body, str):
                response = client.post(f"/v1/comparisons/{cid}/chunks", content=body,
                                       headers={"content-type": "application/json"})
            else:
                response = client.post(f"/v1/comparisons/{cid}/chunks", json=body,
                                       headers={"Idempotency-Key": "bad"})
            assert response.status_code == status, (label, response.text)
            assert_error(response, status, code)
            assert snapshot(server, cid) == before, label


def test_body_over_the_byte_limit_is_413(start_server: StartServer) -> None:
    server = start_server("embedded", max_body_bytes=2000)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        before = snapshot(server, cid)
        big = {"x": [[0.123456789] * 4] * 100, "y": [0.5] * 100}
        assert_error(client.post(f"/v1/comparisons/{cid}/chunks", json=big), 413, "too_large")
        assert snapshot(server, cid) == before


def test_labels_outside_a_classifier_support_are_422(start_server: StartServer) -> None:
    server = start_server("embedded")
    body = {"name": "labels", "models": [
        {"name": "logit", "family": "logistic_regression", "config": {"dim": 2, "classes": 3}},
        {"name": "coin", "family": "beta_bernoulli"}]}
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        before = snapshot(server, cid)
        for y, row, value in (([0, 3], 1, "y = 3"), ([0, 1.5], 1, "y = 1.5"),
                              ([-1, 0], 0, "y = -1")):
            response = client.post(f"/v1/comparisons/{cid}/chunks",
                                   json={"x": [[0, 1], [1, 0]], "y": y})
            assert_error(response, 422, "invalid_chunk")
            error = response.json()["error"]
            assert error["details"] == {"model": "logit", "row": row, "value": value}
            assert error["message"] == (f"model 'logit' refuses row {row} of the chunk (from 0), "
                                        f"{value}: logistic_regression needs integer labels in "
                                        "[0, 3)")
        coin = client.post(f"/v1/comparisons/{cid}/chunks", json={"x": [[0, 1]], "y": [2]})
        assert coin.json()["error"]["details"]["model"] == "coin"
        assert snapshot(server, cid) == before
        ok = client.post(f"/v1/comparisons/{cid}/chunks", json={"x": [[0, 1]], "y": [1]})
        assert ok.status_code == 202


BAD_COMPARISONS: list[tuple[str, dict[str, Any]]] = [
    ("unknown family", {"models": [{"name": "a", "family": "nope"}]}),
    ("bad model config", {"models": [{"name": "a", "family": "linear_regression",
                                      "config": {"dim": -1}}]}),
    ("unknown config key", {"models": [{"name": "a", "family": "linear_regression",
                                        "config": {"dim": 2, "colour": 1}}]}),
    ("columns inside config", {"models": [{"name": "a", "family": "linear_regression",
                                           "config": {"dim": 2, "columns": [0, 1]}}]}),
    ("columns of the wrong length", {"models": [{"name": "a", "family": "linear_regression",
                                                 "config": {"dim": 2}, "columns": [0]}]}),
    ("negative column", {"models": [{"name": "a", "family": "linear_regression",
                                     "config": {"dim": 1}, "columns": [-1]}]}),
    ("column beyond x_dim", {"x_dim": 2, "models": [
        {"name": "a", "family": "linear_regression", "config": {"dim": 1}, "columns": [2]}]}),
    ("duplicate names", {"models": [{"name": "a", "family": "beta_bernoulli"},
                                    {"name": "a", "family": "beta_bernoulli"}]}),
    ("no models", {"models": []}),
    ("bad model name", {"models": [{"name": "a b", "family": "beta_bernoulli"}]}),
    ("model name of dots alone", {"models": [{"name": "..", "family": "beta_bernoulli"}]}),
    ("model name too long", {"models": [{"name": "a" * 65, "family": "beta_bernoulli"}]}),
    ("zero prior", {"models": [{"name": "a", "family": "beta_bernoulli",
                                "prior_probability": 0}]}),
    ("priors leave nothing", {"models": [
        {"name": "a", "family": "beta_bernoulli", "prior_probability": 1.0},
        {"name": "b", "family": "beta_bernoulli"}]}),
    ("unknown method", {"estimator": {"method": "magic"},
                        "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("bad estimator setting", {"estimator": {"method": "sgais", "particles": 1},
                               "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("unknown estimator setting", {"estimator": {"method": "sgais", "warp": 9},
                                   "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("re-estimates too often", {"estimator": {"method": "sgais", "reestimate_growth": 1.2},
                                "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("a setting by its old and its new name", {"estimator": {
        "method": "sgais", "restart_growth": 2.0, "reestimate_growth": 3.0},
        "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("exact for a model without closed form", {"estimator": {"method": "exact"}, "models": [
        {"name": "a", "family": "logistic_regression", "config": {"dim": 2}}]}),
    ("seed is not a number", {"seed": "x", "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("a billion particles", {"estimator": {"method": "sgais", "particles": 10**9},
                             "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("a billion live points", {"estimator": {"method": "nested", "live_points": 10**9},
                               "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("ten million parameters", {"estimator": {"method": "exact"}, "models": [
        {"name": "a", "family": "linear_regression", "config": {"dim": 10**7}}]}),
    ("prior scale that overflows", {"models": [{"name": "a", "family": "linear_regression",
                                                "config": {"dim": 1, "prior_std": 1e300}}]}),
    ("noise scale that underflows", {"models": [{"name": "a", "family": "linear_regression",
                                                 "config": {"dim": 1, "noise_std": 1e-300}}]}),
    ("name too long", {"name": "n" * 201, "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("empty name", {"name": "", "models": [{"name": "a", "family": "beta_bernoulli"}]}),
    ("unicode model name", {"models": [{"name": "modèle", "family": "beta_bernoulli"}]}),
]


def test_bad_comparisons_and_models_are_422_and_create_nothing(
    start_server: StartServer,
) -> None:
    server = start_server("local")
    store = server.redis()
    with server.client() as client:
        for label, body in BAD_COMPARISONS:
            response = client.post("/v1/comparisons", json={"name": "bad", **body})
            assert_error(response, 422)
            assert list(store.scan_iter(match=f"{server.settings.key_prefix}:*")) == [], label
        surrogate = b'{"name": "\\ud800", "models": [{"name": "a", "family": "beta_bernoulli"}]}'
        for raw in (b"{", surrogate):  # not JSON; a lone UTF-16 surrogate in the name
            assert_error(client.post("/v1/comparisons", content=raw,
                                     headers={"content-type": "application/json"}), 422)
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        before = snapshot(server, cid)
        for model in (
            {"name": "m", "family": "linear_regression", "config": {"dim": 5}},
            {"name": "m", "family": "logistic_regression", "config": {"dim": 2}},
            {"name": "right", "family": "linear_regression", "config": {"dim": 1}},
            {"name": "m", "family": "gaussian_mixture", "config": {"dim": 1}, "extra": 1},
            {"name": "m", "family": "linear_regression", "config": {"dim": 10**7}},
        ):
            response = client.post(f"/v1/comparisons/{cid}/models", json=model)
            assert response.status_code in (409, 422), response.text
            assert_error(response, response.status_code)
        assert snapshot(server, cid) == before
        predict = client.post(f"/v1/comparisons/{cid}/predict", json={"x": [[1.0, 2.0]]})
        assert_error(predict, 422, "invalid_chunk")


def test_columns_inside_config_says_where_they_go(start_server: StartServer) -> None:
    server = start_server("embedded")
    model = {"name": "a", "family": "linear_regression", "config": {"dim": 2, "columns": [0, 3]}}
    with server.client() as client:
        response = client.post("/v1/comparisons", json={"name": "bad", "models": [model]})
    assert_error(response, 422, "invalid_request")
    assert response.json()["error"]["message"] == (
        'body.models.0.linear_regression: Value error, "columns" goes beside "config", not inside '
        'it: {"name": …, "family": …, "config": {…}, "columns": [0, 2]}')


def test_an_unknown_key_names_the_valid_ones_and_the_closest(start_server: StartServer) -> None:
    server = start_server("local")
    model = {"name": "m", "family": "linear_regression", "config": {"dim": 1, "noise_sd": 1}}
    with server.client() as client:
        response = client.post("/v1/comparisons", json={"name": "c", "models": [model]})
        assert_error(response, 422, "invalid_request")
        assert response.json()["error"] == {
            "code": "invalid_request",
            "message": "body.models.0.linear_regression.config: unknown key 'noise_sd' (did you "
                       "mean 'noise_std'? valid keys: dim, noise_std, prior_std)",
            "details": [{"loc": ["body", "models", 0, "linear_regression", "config", "noise_sd"],
                         "msg": "unknown key 'noise_sd' (did you mean 'noise_std'? valid keys: "
                                "dim, noise_std, prior_std)",
                         "type": "extra_forbidden"}],
        }
        top = client.post("/v1/comparisons", json={"nmae": "c", "models": []})
        assert top.json()["error"]["message"] == (
            "body.name: Field required; body.models: List should have at least 1 item after "
            "validation, not 0; body: unknown key 'nmae' (did you mean 'name'? valid keys: name, "
            "seed, models, estimator, x_dim, rules)")
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        added = client.post(f"/v1/comparisons/{cid}/models", json={
            "name": "n", "family": "gamma_poisson", "config": {"shap": 1.0}, "prior": 0.5})
        assert added.json()["error"]["message"] == (
            "body.gamma_poisson.config: unknown key 'shap' (did you mean 'shape'? valid keys: "
            "shape, rate); body.gamma_poisson: unknown key 'prior' (valid keys: name, family, "
            "config, columns, formula, prior_probability)")
