"""Past data: appends, full passes in order, and uniform sampling with replacement."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from modelcompare.estimators.data.history import (
    ColumnView,
    ExtendedHistory,
    InMemoryHistory,
    OnDevice,
    Rows,
    cat_rows,
    select_columns,
)


def indexed_rows(start: int, stop: int, columns: int = 3) -> Rows:
    """Rows whose y is their global index and whose x columns are index·10 + column."""
    index = torch.arange(start, stop, dtype=torch.float64)
    x = index[:, None] * 10 + torch.arange(columns, dtype=torch.float64)
    return Rows(x, index)


def filled(rows: int, piece: int = 300) -> InMemoryHistory:
    history = InMemoryHistory(3)
    for start in range(0, rows, piece):
        history.append(indexed_rows(start, min(start + piece, rows)))
    return history


def uniform_p_value(indices: torch.Tensor, size: int) -> float:
    counts = torch.bincount(indices.to(torch.long), minlength=size).numpy()
    return float(stats.chisquare(counts).pvalue)


def test_append_grows_and_keeps_rows_in_order() -> None:
    history = filled(2500)  # crosses the initial 1024-row capacity twice
    assert len(history) == 2500
    assert torch.equal(history.rows().y, torch.arange(2500, dtype=torch.float64))
    assert torch.equal(history.rows().x, indexed_rows(0, 2500).x)
    blocks = list(history.blocks(1000))
    assert [b.count for b in blocks] == [1000, 1000, 500]
    assert torch.equal(cat_rows(blocks).y, history.rows().y)


def test_append_rejects_other_columns() -> None:
    history = InMemoryHistory(3)
    with pytest.raises(ValueError):
        history.append(Rows(None, torch.zeros(2, dtype=torch.float64)))
    y_only = InMemoryHistory(None)
    with pytest.raises(ValueError):
        y_only.append(indexed_rows(0, 2))


def test_sample_is_uniform_with_replacement() -> None:
    history = filled(50)
    g = torch.Generator().manual_seed(0)
    sample = history.sample(20_000, g)
    assert sample.count == 20_000
    assert torch.equal(sample.x[:, 0], sample.y * 10)  # x and y stay paired
    # Chi-square goodness of fit against uniform over 50 rows; a fixed seed makes this
    # deterministic, and p > 1e-3 is what an unbiased sampler gives in 99.9% of seeds.
    assert uniform_p_value(sample.y, 50) > 1e-3


@pytest.mark.parametrize(("past", "absorbed"), [(40, 10), (5, 45), (0, 50), (50, 0)])
def test_extended_history_is_uniform_over_past_and_absorbed(past: int, absorbed: int) -> None:
    history = filled(past) if past else InMemoryHistory(3)
    extended = ExtendedHistory(history, indexed_rows(past, past + absorbed))
    assert len(extended) == 50
    g = torch.Generator().manual_seed(1)
    sample = extended.sample(20_000, g)
    assert sample.count == 20_000
    assert torch.equal(sample.x[:, 0], sample.y * 10)
    assert uniform_p_value(sample.y, 50) > 1e-3
    passed = cat_rows(list(extended.blocks(7)))
    assert torch.equal(passed.y, torch.arange(50, dtype=torch.float64))
    assert len(history) == past  # the past itself is untouched


def test_column_view_selects_and_samples_columns() -> None:
    history = filled(30)
    view = ColumnView(history, [2, 0])
    assert len(view) == 30
    whole = cat_rows(list(view.blocks(8)))
    assert torch.equal(whole.x, history.rows().x[:, [2, 0]])
    assert torch.equal(whole.y, history.rows().y)
    g = torch.Generator().manual_seed(2)
    sample = view.sample(15_000, g)
    assert sample.x.shape == (15_000, 2)
    assert torch.equal(sample.x[:, 0], sample.y * 10 + 2)
    assert torch.equal(sample.x[:, 1], sample.y * 10)
    assert uniform_p_value(sample.y, 30) > 1e-3
    # No columns: models without inputs see y only.
    y_only = ColumnView(history, None)
    assert y_only.sample(3, g).x is None
    assert next(iter(y_only.blocks(5))).x is None


def test_a_view_of_every_column_in_order_passes_the_rows_through_uncopied() -> None:
    """All of x's columns in order: the drawn rows themselves (no copy); any other list, even a
    permutation of all of them or a prefix, is selected."""
    history = filled(12)
    rows = history.rows()
    width = rows.x.shape[1]
    assert select_columns(rows, torch.arange(width)).x is rows.x
    for columns in (torch.arange(width).flip(0), torch.arange(width - 1)):
        selected = select_columns(rows, columns)
        assert selected.x is not rows.x
        assert torch.equal(selected.x, rows.x[:, columns])
    whole = ColumnView(history, list(range(width))).sample(5, torch.Generator().manual_seed(1))
    assert torch.equal(whole.x, rows.x[torch.randint(12, (5,), generator=torch.Generator()
                                                      .manual_seed(1))])


def test_column_view_over_extended_history() -> None:
    extended = ExtendedHistory(filled(20), indexed_rows(20, 40))
    view = ColumnView(extended, [1])
    g = torch.Generator().manual_seed(3)
    sample = view.sample(20_000, g)
    assert torch.equal(sample.x[:, 0], sample.y * 10 + 1)
    assert uniform_p_value(sample.y, 40) > 1e-3


DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]


@pytest.mark.parametrize("device", DEVICES)
def test_on_device_hands_over_the_same_rows(device: str) -> None:
    """A CPU history read through ``OnDevice``: the same draws and blocks, on the device (the
    index is drawn on the generator's device and gathers the rows where they are stored)."""
    history = InMemoryHistory(2)
    history.append(Rows(torch.randn(50, 2, dtype=torch.float64), torch.randn(50)))
    view = OnDevice(ExtendedHistory(history, Rows(torch.ones(5, 2), torch.ones(5))), device)
    assert len(view) == 55
    g = torch.Generator(device=device).manual_seed(0)
    drawn = view.sample(7, g)
    assert drawn.x.device.type == drawn.y.device.type == torch.device(device).type
    assert drawn.count == 7
    blocks = list(view.blocks(20))
    assert [b.count for b in blocks] == [20, 20, 10, 5]
    assert torch.equal(cat_rows(blocks).x.cpu()[:50], history.rows().x)
