"""Comparisons by formula over HTTP: creation derives each model's dim and the stored design,
describe shows them, and every refused formula is a 422 that says why with nothing created."""

from __future__ import annotations

from typing import Any

import pytest
from service_server import Server

from modelcompare.service.client import Client, ModelCompareError

SEX = "C(sex, levels=[1, 2])"


def model(name: str, formula: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "family": "linear_regression", "formula": formula, **fields}


def named(*models: dict[str, Any]) -> dict[str, Any]:
    return {"name": "named", "models": list(models)}


def refused(api: Client, body: dict[str, Any]) -> str:
    """The 422 message of creating ``body``, checking that nothing was created."""
    before = len(api.list_comparisons(limit=500)["comparisons"])
    with pytest.raises(ModelCompareError) as error:
        api.create_comparison(body)
    assert (error.value.status, error.value.code) == (422, "invalid_request")
    assert len(api.list_comparisons(limit=500)["comparisons"]) == before
    return error.value.message


def test_describe_shows_the_design_and_each_models_formula(embedded_server: Server) -> None:
    with Client(embedded_server.url) as api:
        created = api.create_comparison(named(
            model("small", "target ~ bmi + bp"),
            model("large", f"target ~ bmi + bp + bmi:bp + {SEX}", config={"dim": 4}),
            {"name": "labels", "family": "logistic_regression", "formula": "target ~ np.log(bp)",
             "config": {"classes": 3}}))
        described = api.get_comparison(created["id"])
    assert described == created
    assert described["variables"] == ["bmi", "bp", "sex"]
    assert described["target_column"] == "target"
    assert described["design"] == ["bmi", "bp", "C(sex, levels=[1, 2])[T.2]", "bmi:bp",
                                   "np.log(bp)"]
    assert (described["x_dim"], described["has_y"]) == (5, True)
    assert [(m["formula"], m["columns"], m["config"]["dim"]) for m in described["models"]] == [
        ("target ~ bmi + bp", [0, 1], 2),
        (f"target ~ bmi + bp + bmi:bp + {SEX}", [0, 1, 2, 3], 4),
        ("target ~ np.log(bp)", [4], 1),
    ]


def test_a_matrix_comparison_describes_no_names(embedded_server: Server) -> None:
    with Client(embedded_server.url) as api:
        created = api.create_comparison({"name": "matrix", "models": [
            {"name": "m", "family": "linear_regression", "config": {"dim": 1}}]})
    assert (created["variables"], created["target_column"], created["design"]) == (None,) * 3
    assert created["models"][0]["formula"] is None


@pytest.mark.parametrize(("body", "message"), [
    (named(model("m", "target ~ bmi + bp", config={"dim": 3})),
     "body.models.0.linear_regression: Value error, config.dim is 3 but formula 'target ~ bmi "
     "+ bp' makes 2 design columns (bmi, bp)"),
    (named(model("m", "target ~ bmi +")),
     "body.models.0.linear_regression: Value error, formula 'target ~ bmi +': Operator `+` has "
     "insuffient arguments and/or is misplaced."),
    (named(model("m", "target ~ bmi - 1")),
     "body.models.0.linear_regression: Value error, formula 'target ~ bmi - 1' removes the "
     "intercept: the intercept is the model's own bias, which the family always has, and it "
     "fixes how categories are coded (against the first declared level); leave out '- 1', "
     "'+ 0' and '0 +'"),
    (named(model("m", "target ~ scale(bmi)")),
     "body.models.0.linear_regression: Value error, formula 'target ~ scale(bmi)': scale() is "
     "refused: its value depends on the data seen, so chunks would be coded differently; write "
     "the constant yourself, e.g. I(bmi - 26.4)"),
    (named(model("m", "target ~ C(sex)")),
     "body.models.0.linear_regression: Value error, formula 'target ~ C(sex)': declare the "
     "levels of 'sex': C(sex, levels=[...])"),
    (named(model("m", "target ~ bmi", columns=[0])),
     "body.models.0.linear_regression: Value error, a model reads \"formula\" or \"columns\", "
     "not both"),
    (named(model("m", "target ~ bmi"),
           {"name": "n", "family": "linear_regression", "config": {"dim": 1}}),
     "body: Value error, models ['m'] read named columns by formula: every model of a "
     "comparison gives a formula, or none does"),
    (named(model("m", "y ~ bmi"), model("n", "target ~ bmi")),
     "the models' formulas name different targets: 'y', 'target'; a comparison has one"),
    (named(model("m", "~ bmi")),
     "model 'm': family 'linear_regression' has a target; name it on the left of the formula: "
     "'target ~ …'"),
    (named({"name": "m", "family": "beta_bernoulli", "formula": "target ~ bmi"}),
     "body.models.0.beta_bernoulli: Value error, formula 'target ~ bmi' makes 1 design columns "
     "but the family reads no inputs: its formula is 'target ~ 1'"),
    ({**named(model("m", "target ~ bmi + bp")), "x_dim": 3},
     "x_dim is 3 but the formulas make 2 design columns; leave x_dim out"),
])
def test_a_refused_formula_is_a_422_that_says_why(embedded_server: Server,
                                                  body: dict[str, Any], message: str) -> None:
    with Client(embedded_server.url) as api:
        assert refused(api, body) == message


def test_a_model_added_by_formula_reads_stored_columns_only(embedded_server: Server) -> None:
    with Client(embedded_server.url) as api:
        cid = api.create_comparison(named(model("full", f"target ~ bmi * {SEX}")))["id"]
        added = api.add_model(cid, model("main", f"target ~ bmi + {SEX}"))
        assert added["model"] == "main"
        described = api.get_comparison(cid)
        assert [m["columns"] for m in described["models"]] == [[0, 1, 2], [0, 1]]
        with pytest.raises(ModelCompareError) as never_stored:
            api.add_model(cid, model("more", "target ~ bmi + bp"))
        assert never_stored.value.message == (
            "formula 'target ~ bmi + bp' reads 'bp', never stored: this comparison stores "
            "bmi, C(sex, levels=[1, 2])[T.2], bmi:C(sex, levels=[1, 2])[T.2] (its design is "
            "fixed when it is created)")
        with pytest.raises(ModelCompareError) as by_index:
            api.add_model(cid, {"name": "idx", "family": "linear_regression",
                                "config": {"dim": 1}, "columns": [0]})
        assert by_index.value.message == (
            "model 'idx': this comparison reads named columns (bmi, sex); give a \"formula\", "
            "not \"columns\"")
        matrix = api.create_comparison({"name": "matrix", "models": [
            {"name": "m", "family": "linear_regression", "config": {"dim": 1}}]})["id"]
        with pytest.raises(ModelCompareError) as on_matrix:
            api.add_model(matrix, model("f", "target ~ bmi"))
        assert on_matrix.value.message == (
            "model 'f': this comparison's rows are matrices x without names; give \"columns\" "
            "(indices into x), not \"formula\"")
        assert [len(api.get_comparison(c)["models"]) for c in (cid, matrix)] == [2, 1]
        assert {e.value.status for e in (never_stored, by_index, on_matrix)} == {422}
