"""Fast recovery with real processes: the lease holder SIGKILLed, its comparison is committed
again within a few seconds (not after a 30 s lease); redis-server SIGKILLed and restarted from
its AOF with the lease in it, the holder takes the lease straight back. Nothing is lost or
applied twice, and the states are bit-identical to a clean run."""

from __future__ import annotations

import signal
from pathlib import Path

from fault_processes import Deployment
from recovery_trials import Scenario

from modelcompare.service.core.config import Settings


def test_a_killed_lease_holder_is_replaced_within_seconds(tmp_path: Path) -> None:
    defaults = Settings()
    ttl, poll = defaults.lease_ttl, defaults.poll_interval
    deployment = Deployment(tmp_path, workers=2)
    deployment.start()
    try:
        scenario = Scenario(deployment)
        waits = [scenario.kill_holder() for _ in range(2)]
        print(f"\nnext commit after killing the lease holder: {waits} s")
        # the lease expires ttl after its last renewal (every ttl / 3): then one poll, one update
        assert max(waits) < ttl + poll + 2.5, waits
        audit = scenario.audit()
    finally:
        deployment.stop()
    assert audit["applied"] == audit["sent"] and audit["pending"] == 0
    assert audit["in_order_once"] and audit["bit_identical"]


def test_the_holder_retakes_its_lease_after_a_redis_restart(tmp_path: Path) -> None:
    """A long lease, so that waiting it out (as SET NX did) would take 20 s."""
    deployment = Deployment(tmp_path, workers=1, lease_ttl=20.0, poll_interval=0.2)
    deployment.start()
    try:
        scenario = Scenario(deployment)
        for _ in range(5):  # until a kill lands while the lease is held: the case under test
            seconds, survived = scenario.restart_redis()
            if survived:
                break
        assert survived, "no restart kept the lease in 5 tries"
        print(f"\nnext commit after Redis was back: {seconds:.2f} s")
        assert seconds < 3.0
        audit = scenario.audit()
    finally:
        deployment.stop()
    assert audit["applied"] == audit["sent"] and audit["pending"] == 0
    assert audit["in_order_once"] and audit["bit_identical"]


def test_sigterm_releases_the_lease_at_once(tmp_path: Path) -> None:
    """A stopped worker (deploy, scale-down) hands its comparison over without a wait."""
    deployment = Deployment(tmp_path, workers=1, lease_ttl=20.0)
    deployment.start()
    try:
        scenario = Scenario(deployment)
        holder = scenario.busy_holder()
        assert holder.process is not None
        holder.process.send_signal(signal.SIGTERM)
        assert holder.process.wait(timeout=30) == 0
        assert scenario.store().get(scenario.keys.lease) is None
    finally:
        deployment.stop()
