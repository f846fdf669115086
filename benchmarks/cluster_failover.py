"""A Redis Cluster master dies under traffic: what clients see, and what survives.

Real processes: redis-server cluster nodes (AOF ``appendfsync always``, a short
``cluster-node-timeout``), ``modelcompare serve`` and ``modelcompare worker``. Six comparisons
(2 linear regressions each, exact evidence) take a mix of requests, round after round: a chunk
(with an ``Idempotency-Key``), the evidence, the description and the history of every
comparison, the comparison list and ``/readyz``.

- Scenario A (3 masters, no replicas; once with the nodes' ``cluster-require-full-coverage no``,
  once with Redis' default ``yes``): SIGKILL the master of the first comparison, keep the
  traffic going for ``--outage`` seconds, restart the master from its AOF. Counts the answers by
  status (no 500 allowed) and how long a 503 took, the dropped connections, ``/readyz`` over
  time (polled every 0.25 s from the kill on, in a thread of its own), the chunks applied
  during the outage on the masters that stayed up, and, once the chunks answered 503 were sent
  again under their keys, the chunks acknowledged against those applied after the restart.
- Scenario B (3 masters, one replica each): SIGKILL the master of a comparison (after its
  replica has every write, ``WAIT``), and time from the kill to the first chunk accepted for
  that comparison (the replica took over); ``--trials`` times.

Prints a table; writes benchmarks/results/cluster_failover.json. ``--quick``: shorter outage,
one trial.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import QUICK, environment, table, verdict, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "faults")]
from cluster_processes import ClusterDeployment, Tally  # noqa: E402


def applied(d: ClusterDeployment, cid: str) -> int:
    """The comparison's applied sequence; 0 when it cannot be read (its master is down, or
    the whole cluster refuses commands)."""
    assert d.http is not None
    reply = d.http.get(f"/v1/comparisons/{cid}/evidence")
    return int(reply.json()["sequence"]) if reply.status_code == 200 else 0


def scenario_a(folder: Path, full_coverage: bool, outage: float,
               node_timeout_ms: int) -> dict[str, Any]:
    d = ClusterDeployment(folder, replicas=0, full_coverage=full_coverage,
                          node_timeout_ms=node_timeout_ms)
    d.start()
    try:
        ids = d.create(6)
        d.mixed_round(ids, Tally())
        victim = d.master_of(ids[0])
        on_victim = [cid for cid in ids if d.master_of(cid) == victim]
        elsewhere = [cid for cid in ids if cid not in on_victim]
        applied_before = {cid: applied(d, cid) for cid in elsewhere}
        d.cluster.kill(victim)
        watch = d.watch_readyz()
        killed = watch.started
        outage_tally = Tally()
        while time.monotonic() - killed < outage:
            d.mixed_round(ids, outage_tally)
        # chunks applied meanwhile on the masters that stayed up (read before the restart)
        applied_during = sum(max(applied(d, cid) - applied_before[cid], 0) for cid in elsewhere)
        restarted = time.monotonic() - killed
        d.cluster.restart(victim)
        back = time.monotonic()
        while d.readyz()[0] != 200 and time.monotonic() - back < 60:
            time.sleep(0.05)
        time.sleep(0.5)
        answers = watch.stop()
        ready_after_restart = time.monotonic() - back
        readyz = [(round(t, 2), status) for t, status, _ in answers]
        reasons = sorted({body for _, status, body in answers if status == 503})
        after = Tally()
        d.mixed_round(ids, after)
        unsure = sum(len(v) for v in d.unsure.values())
        d.resend_unsure()
        audit = d.audit(ids)
    finally:
        d.stop()
    statuses: dict[str, int] = {}
    for (route, status), n in sorted(outage_tally.statuses.items()):
        statuses[f"{route} {status}"] = n
    return {
        "full_coverage": full_coverage, "comparisons": len(ids),
        "on_dead_master": len(on_victim), "outage_seconds": outage,
        "outage_answers": statuses, "outage_500": outage_tally.of(500),
        "outage_503": outage_tally.of(503),
        "outage_2xx": outage_tally.of(200) + outage_tally.of(202),
        "dropped_connections": dict(outage_tally.dropped),
        "bodies_500": outage_tally.bodies_500[:5],
        "seconds_503": {"median": statistics.median(outage_tally.seconds_503),
                        "max": max(outage_tally.seconds_503)},
        "readyz": readyz, "readyz_503_reasons": reasons[:3],
        "restarted_at": restarted,
        "readyz_200_while_down": sum(1 for t, s in readyz if s == 200 and t < restarted),
        "readyz_checks_while_down": sum(1 for t, _ in readyz if t < restarted),
        "first_readyz_503_after": min((t for t, s in readyz if s == 503), default=None),
        "ready_seconds_after_restart": ready_after_restart,
        "applied_during_outage_on_live_masters": applied_during,
        "after_restart_answers": {f"{r} {s}": n for (r, s), n in after.statuses.items()},
        "chunks_answered_503_sent_again": unsure,
        "audit": audit,
    }


def scenario_b(folder: Path, trials: int, node_timeout_ms: int) -> dict[str, Any]:
    d = ClusterDeployment(folder, replicas=1, node_timeout_ms=node_timeout_ms)
    d.start()
    seconds, answers, dropped, bodies = [], Tally(), 0, []
    try:
        ids = d.create(6)
        for trial in range(trials):
            for cid in ids:
                d.post_chunk(cid)
            cid = ids[trial % len(ids)]
            victim = d.master_of(cid)
            d.cluster.wait_for_replicas(victim)
            d.cluster.kill(victim)
            killed = time.monotonic()
            while d.post_chunk(cid, answers) != 202 and time.monotonic() - killed < 60:
                time.sleep(0.02)
            seconds.append(time.monotonic() - killed)
            print(f"  trial {trial + 1}: first chunk accepted {seconds[-1]:.2f} s after the kill"
                  f" of master {victim}")
            # the old master comes back as a replica of the new one, for the next trial
            d.cluster.restart(victim)
            d.cluster.wait_until(d.cluster.healthy, "the cluster did not heal", 60)
        for cid in ids:
            d.post_chunk(cid)
        d.resend_unsure()
        audit = d.audit(ids)
        dropped = sum(answers.dropped.values())
        bodies = answers.bodies_500[:5]
    finally:
        d.stop()
    return {"first_write_seconds": seconds,
            "median": statistics.median(seconds), "max": max(seconds),
            "answers_until_then": {f"{r} {s}": n for (r, s), n in answers.statuses.items()},
            "answers_500": answers.of(500), "dropped_connections": dropped,
            "bodies_500": bodies, "audit": audit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=4.0 if QUICK else 10.0,
                        help="seconds of traffic with the master down (scenario A)")
    parser.add_argument("--trials", type=int, default=1 if QUICK else 3,
                        help="failovers timed (scenario B)")
    parser.add_argument("--node-timeout-ms", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="a smoke run into results/quick/")
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for full in (False, True):
            name = f"A_full_coverage_{'yes' if full else 'no'}"
            print(f"scenario {name}:")
            runs[name] = scenario_a(Path(tmp) / name, full, args.outage, args.node_timeout_ms)
        print("scenario B (replicas):")
        runs["B_replicas"] = scenario_b(Path(tmp) / "B", args.trials, args.node_timeout_ms)

    rows = []
    for name in ("A_full_coverage_no", "A_full_coverage_yes"):
        run = runs[name]
        audit = run["audit"]
        rows.append([
            f"A, no replicas, require-full-coverage {'yes' if run['full_coverage'] else 'no'}",
            run["outage_2xx"], run["outage_503"], run["outage_500"],
            sum(run["dropped_connections"].values()),
            f"{run['readyz_checks_while_down'] - run['readyz_200_while_down']} of "
            f"{run['readyz_checks_while_down']}",
            run["first_readyz_503_after"], run["seconds_503"]["median"],
            run["seconds_503"]["max"],
            f"{run['ready_seconds_after_restart']:.2f}",
            run["applied_during_outage_on_live_masters"],
            f"{audit['acknowledged']} / {audit['applied']}",
        ])
    print(table(["scenario", "2xx", "503", "500", "dropped", "readyz 503 while down",
                 "first 503 s", "503 p50 s", "503 max s", "ready after restart s",
                 "applied meanwhile", "acknowledged / applied"], rows))
    b = runs["B_replicas"]
    print(table(["scenario", "failovers", "first write median s", "max s", "500", "dropped",
                 "acknowledged / applied"],
                [["B, one replica per master", len(b["first_write_seconds"]), b["median"],
                  b["max"], b["answers_500"], b["dropped_connections"],
                  f"{b['audit']['acknowledged']} / {b['audit']['applied']}"]]))
    bound = args.node_timeout_ms / 1000 + 3
    targets = {
        "A_no_500": all(runs[n]["outage_500"] == 0 for n in runs if n.startswith("A")),
        "A_no_dropped_connections": all(not runs[n]["dropped_connections"]
                                        for n in runs if n.startswith("A")),
        "A_readyz_503_while_down": all(runs[n]["readyz_200_while_down"] == 0
                                       for n in runs if n.startswith("A")),
        "A_live_masters_served_with_full_coverage_no":
            runs["A_full_coverage_no"]["applied_during_outage_on_live_masters"] > 0,
        "nothing_lost": all(run["audit"]["lost"] == 0 and run["audit"]["extra"] == 0
                            and run["audit"]["rows"] == run["audit"]["rows_expected"]
                            for run in runs.values()),
        f"B_first_write_within_{bound:g}s": b["max"] <= bound,
        "B_no_500": b["answers_500"] == 0,
    }
    for key, ok in targets.items():
        print(f"{key}: {verdict(ok)}")
    path = write_json("cluster_failover", {"environment": environment(1),
                                           "arguments": vars(args), "runs": runs,
                                           "targets": targets})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
