"""chaos: Jepsen-style chaos testing for real clusters."""

__version__ = "0.1.0"
