"""The six golden streams of the SG-AIS engine and the one way they are run and recorded
(``test_golden.py`` compares with ``expected/<platform>.json``; ``regenerate.py`` writes it).

Each stream is a model, a method with its settings, rows drawn from torch generators of fixed
seed, and 15 chunks fed the way the service feeds them (``service.engine.Runner``): the estimator
from ``modelcompare.estimators.build``, its state from ``init`` with the generator of
(seed, name, "init"), each chunk absorbed by ``update`` with the generator of
(seed, name, sequence) and a ``ColumnView`` of the rows before it, one torch thread. After each
chunk the record holds the SHA-256 of the state's bytes (``state_to_bytes``), a short digest of
each state field (to say which field moved when the whole differs) and the Info record, every
float written as its ``repr`` (which reads back as the same float, NaN and infinities included).
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from modelcompare.estimators import ColumnView, InMemoryHistory, Rows, build, state_to_bytes
from modelcompare.estimators.data.serialization import leaves
from modelcompare.models import GaussianMixture, LinearRegression, LogisticRegression, Model

F64 = torch.float64
CHUNKS = 15
FIELD_DIGEST_CHARS = 16  # per-field digests are diagnostics: 64 bits tell fields apart


def linear_iid(rows: int, seed: int, dim: int = 3) -> Rows:
    """y = wᵀx + b + N(0, 1), x ~ N(0, I), one fixed (w, b) (its first ``dim`` weights)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=g, dtype=F64)
    weights = torch.tensor([0.8, -0.5, 0.3], dtype=F64)[:dim]
    return Rows(x, x @ weights + 0.4 + torch.randn(rows, generator=g, dtype=F64))


def linear_iid_2d(rows: int, seed: int) -> Rows:
    return linear_iid(rows, seed, dim=2)


def linear_drift(rows: int, seed: int) -> Rows:
    """y = wᵀx + b + N(0, 1), x ~ N(0, I₂), (w, b) drawn with scale 3 for each third of the
    rows: two change points that a posterior formed on the rows before cannot explain."""
    g = torch.Generator().manual_seed(seed)
    regimes = 3.0 * torch.randn(3, 3, generator=g, dtype=F64)
    x = torch.randn(rows, 2, generator=g, dtype=F64)
    chosen = regimes[torch.arange(rows) * 3 // rows]
    noise = torch.randn(rows, generator=g, dtype=F64)
    return Rows(x, (x * chosen[:, :2]).sum(1) + chosen[:, 2] + noise)


def softmax_labels(rows: int, seed: int) -> Rows:
    """Labels 0, 1, 2 drawn from softmax(W x + c), x ~ N(0, I₂), one fixed (W, c)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2, generator=g, dtype=F64)
    weights = torch.tensor([[1.5, -0.5], [-1.0, 1.0], [0.0, -1.0]], dtype=F64)
    logits = x @ weights.T + torch.tensor([0.3, 0.0, -0.3], dtype=F64)
    y = torch.multinomial(torch.softmax(logits, 1), 1, generator=g)[:, 0]
    return Rows(x, y.to(F64))


def sorted_mixture(rows: int, seed: int) -> Rows:
    """1-D rows of an equal-weight mixture of N(±3, 0.7²), sorted: the second component only
    arrives once the posterior has settled on the first."""
    g = torch.Generator().manual_seed(seed)
    means = torch.tensor([[3.0], [-3.0]], dtype=F64)
    labels = torch.randint(0, 2, (rows,), generator=g)
    x = means[labels] + 0.7 * torch.randn(rows, 1, generator=g, dtype=F64)
    return Rows(x[torch.argsort(x[:, 0])], None)


@dataclass(frozen=True)
class Stream:
    name: str
    model: Callable[[], Model]
    method: str
    settings: dict[str, Any]
    data: Callable[[int, int], Rows]  # (rows, seed) -> the stream's rows
    chunk_rows: int
    data_seed: int
    seed: int  # the engine's seed, as a comparison's
    chunks: int = CHUNKS
    # the part of the engine the stream guards (``test_golden.CHECKS`` checks that it fired)
    guards: str = ""

    @property
    def rows(self) -> int:
        return self.chunk_rows * self.chunks


# Small clouds, short moves: the six streams run in a few seconds on one thread, each still
# reaching the part of the engine it guards (the ``guards`` lines; ``test_golden`` checks
# each against the Info records).
STREAMS: dict[str, Stream] = {
    s.name: s
    for s in (
        Stream(
            "linear_iid",
            lambda: LinearRegression(3),
            "sgais",
            # 25-row chunks: the schedule cuts the first ones in two (20 rows while n ≤ 80);
            # exact HMC until 40 rows, SGHMC with control variates after
            {"particles": 32, "full_batch_rows": 40, "steps": 5, "hmc_moves": 2,
             "leapfrog_steps": 5},
            linear_iid, 25, data_seed=11, seed=1,
            guards="exact phase, then SGHMC re-anchored; chunks cut into pieces",
        ),
        Stream(
            "linear_drift_careful",
            lambda: LinearRegression(2),
            "sgais",
            # the careful ladder (past careful_steps: ESS target careful_ess_target, moves of
            # careful_move_steps, careful_particles × M particles and back) and the surprise
            # moves after a surprising piece (surprise_moves), each set here explicitly
            {"particles": 32, "full_batch_rows": 40, "steps": 5, "hmc_moves": 2,
             "leapfrog_steps": 5, "surprise_steps": 4, "surprise_ess": 0.1,
             "surprise_moves": 2, "careful_steps": 4, "careful_ess_target": 0.95,
             "careful_move_steps": 10, "careful_particles": 2, "standard_error": "genealogy"},
            linear_drift, 20, data_seed=12, seed=2,
            guards="careful ladder (a piece past surprise_steps after the exact phase) and "
            "extra moves after a surprising piece",
        ),
        Stream(
            "softmax_score_controls",
            lambda: LogisticRegression(2, classes=3),
            "sgais",
            # 9 parameters: score controls need particles ≥ 4 × (9 + 1)
            {"particles": 48, "full_batch_rows": 40, "steps": 5, "hmc_moves": 2,
             "leapfrog_steps": 5, "control_variates": True, "increment_control": "score"},
            softmax_labels, 20, data_seed=13, seed=3,
            guards="anchored minibatch gradients and score controls of each piece's first "
            "increment",
        ),
        Stream(
            "sorted_mixture_reestimate",
            lambda: GaussianMixture(1, 2),
            "sgais",
            # SGHMC's lr at 4× its default and plain SGHMC (no noise friction, which would
            # shorten the step where the gradients are this noisy): once the past is read in
            # minibatches the moves send the unpinned component's log-variance astray (most
            # trajectories undone as diverged), as on the sorted calibration streams
            # (docs/design/re-estimates.md);
            # re-estimates from row 0 on, at n ≥ 2 × the last one's rows; no careful ladder or
            # surprise moves here (the drift stream has them), which keeps the stream cheap
            {"particles": 32, "full_batch_rows": 40, "steps": 5, "hmc_moves": 2,
             "leapfrog_steps": 5, "lr": 0.1, "noise_friction": False,
             "surprise_steps": 10_000, "surprise_moves": 0,
             "careful_steps": 10_000, "reestimate_growth": 2.0, "reestimate_min_rows": 0,
             "reestimate_max_rows": 20_000},
            sorted_mixture, 20, data_seed=0, seed=0,
            guards="a re-estimate over the shuffled rows seen after a chunk left the "
            "particles astray",
        ),
        Stream(
            "linear_islands",
            lambda: LinearRegression(2),
            "sgais",
            {"particles": 32, "islands": 2, "full_batch_rows": 40, "steps": 5,
             "hmc_moves": 2, "leapfrog_steps": 5},
            linear_iid_2d, 20, data_seed=15, seed=5,
            guards="two islands side by side in the state, their Ẑ averaged",
        ),
        Stream(
            "hybrid",
            lambda: LinearRegression(2),
            "hybrid",
            # nested sampling on the first 30 rows (re-run at 12 and 24), SG-AIS after; the
            # third chunk crosses: 6 rows nested, 6 by SG-AIS
            {"particles": 32, "live_points": 16, "nested_parallel": 8, "nested_rows": 30,
             "full_batch_rows": 40, "steps": 5, "hmc_moves": 2, "leapfrog_steps": 5},
            linear_iid_2d, 12, data_seed=16, seed=6,
            guards="nested phase, a chunk crossing nested_rows, SG-AIS phase",
        ),
    )
}


@contextmanager
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def rows_digest(rows: Rows) -> str:
    """SHA-256 of the stream's rows (dtype, shape and bytes of x and y), so that a change in
    torch's random numbers shows as changed data, not as a changed engine."""
    digest = hashlib.sha256()
    for part in rows:
        digest.update(b"none" if part is None else tensor_bytes(part))
    return digest.hexdigest()


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    tensor = tensor.detach().contiguous().cpu()
    header = f"{tensor.dtype}{tuple(tensor.shape)}".encode()
    return header + tensor.reshape(-1).view(torch.uint8).numpy().tobytes()


def exact_value(value: Any) -> Any:
    """An Info value as JSON that reads back equal: floats (NaN, infinities too) as their repr,
    ints, bools and strings as they are."""
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return float.__repr__(value)
    raise TypeError(f"an Info field of type {type(value).__name__} has no exact JSON form")


def info_record(info: Any) -> dict[str, Any]:
    return {
        "type": type(info).__name__,
        **{name: exact_value(value) for name, value in dataclasses.asdict(info).items()},
    }


def state_record(state: Any) -> dict[str, Any]:
    return {
        "state_sha256": hashlib.sha256(state_to_bytes(state)).hexdigest(),
        "fields": {
            name: hashlib.sha256(tensor_bytes(value)).hexdigest()[:FIELD_DIGEST_CHARS]
            for name, value in leaves(state).items()
        },
    }


@dataclass(frozen=True)
class Run:
    data_sha256: str
    chunks: list[dict[str, Any]]  # per chunk: state_sha256, fields, info
    states: list[Any]  # the state after each chunk (for the test's checks, not stored)
    infos: list[Any]


def run(stream: Stream, seed: int | None = None, chunks: int | None = None) -> Run:
    """``stream`` fed chunk by chunk as the service feeds it: its first ``chunks`` chunks (all
    by default), with ``seed`` in place of its own engine seed if given."""
    seed = stream.seed if seed is None else seed
    chunks = stream.chunks if chunks is None else chunks
    data = stream.data(stream.rows, stream.data_seed)
    model = stream.model()
    columns = list(range(model.input_dim)) if model.input_dim > 0 else None
    records, states, infos = [], [], []
    with one_thread():
        estimator = build(model, stream.method, **stream.settings)
        state = estimator.init(estimator.generator(seed, stream.name, "init"))
        history = InMemoryHistory(
            None if data.x is None else data.x.shape[1], has_y=data.y is not None
        )
        for sequence in range(chunks):
            begin = sequence * stream.chunk_rows
            rows = data.slice(begin, begin + stream.chunk_rows)
            view = ColumnView(history, columns)
            generator = estimator.generator(seed, stream.name, sequence)
            state, info = estimator.update(state, view.select(rows), view, generator)
            history.append(rows)
            records.append({**state_record(state), "info": info_record(info)})
            states.append(state)
            infos.append(info)
    return Run(rows_digest(data), records, states, infos)


def environment() -> dict[str, str]:
    """What the stored digests were computed with: float results differ in their last digits
    across torch versions and CPU kinds (the vector width of torch's and MKL's kernels)."""
    return {
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
    }


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


def platform_key() -> str:
    """The name of the digests file for this torch and CPU kind (``expected/<key>.json``)."""
    env = environment()
    words = f"{env['torch']} {env['machine']} {env['cpu_capability']} {env['cpu']}"
    return re.sub(r"[^a-z0-9.]+", "-", words.lower()).strip("-")


def expected_document() -> dict[str, Any]:
    """What a digests file holds: the environment, and per stream its settings, the digest of
    its rows and its chunks' records."""
    streams = {}
    for name, stream in STREAMS.items():
        found = run(stream)
        streams[name] = {
            "model": stream.model().config() | {"family": stream.model().family},
            "method": stream.method,
            "settings": stream.settings,
            "chunk_rows": stream.chunk_rows,
            "seed": stream.seed,
            "data_seed": stream.data_seed,
            "data_sha256": found.data_sha256,
            "chunks": found.chunks,
        }
    return {"environment": environment(), "streams": streams}
