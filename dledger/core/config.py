"""Timing and limit settings of the consensus core (DLedgerConfig fields, tuned for fast failover)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CoreConfig:
    """Settings of one member; times in milliseconds of the caller's clock.

    DLedger's defaults are a 2000 ms heartbeat and 3 missed beats (about 6 s to fail over); ours are
    100 ms and 3 so a failover takes well under a second. ``peers`` lists every member id including
    ``self_id``. Raises ValueError on inconsistent values.
    """

    self_id: str
    peers: list[str]
    group: str = "default"
    heartbeat_ms: int = 100
    max_heartbeat_leak: int = 3
    min_vote_interval_ms: int = 30
    max_vote_interval_ms: int = 180
    vote_timeout_ms: int = 200
    push_timeout_ms: int = 500
    commit_delay_ms: int = 10  # a lone COMMIT push waits this long for an APPEND to carry it
    max_push_batch_bytes: int = 512 * 1024
    max_push_batch_entries: int = 1000
    max_inflight_pushes: int = 16
    max_pending: int = 10000
    max_transfer_lag: int = 1000
    transfer_timeout_ms: int = 1000
    preferred_leaders: list[str] = field(default_factory=list)
    preferred_check_ms: int = 1000

    def __post_init__(self) -> None:
        if self.self_id not in self.peers:
            raise ValueError(f"self id {self.self_id!r} is not in peers {self.peers}")
        if self.heartbeat_ms <= 0 or self.max_heartbeat_leak <= 0:
            raise ValueError("heartbeat_ms and max_heartbeat_leak must be > 0")
        if not 0 <= self.min_vote_interval_ms < self.max_vote_interval_ms:
            raise ValueError("expected 0 <= min_vote_interval_ms < max_vote_interval_ms")
        for p in self.preferred_leaders:
            if p not in self.peers:
                raise ValueError(f"preferred leader {p!r} is not in peers {self.peers}")

    @property
    def lease_ms(self) -> int:
        """Follower timeout and leader lease: heartbeat_ms * max_heartbeat_leak."""
        return self.heartbeat_ms * self.max_heartbeat_leak
