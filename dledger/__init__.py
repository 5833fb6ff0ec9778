"""A Python re-implementation of DLedger, the Raft-based commit log behind RocketMQ."""

__version__ = "0.1.0"
