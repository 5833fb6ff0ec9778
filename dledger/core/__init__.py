"""The sans-IO consensus core: :class:`Core`, its :class:`CoreConfig` and :class:`Ready` output."""

from dledger.core.config import CoreConfig
from dledger.core.node import Core, Ready, Role

__all__ = ["Core", "CoreConfig", "Ready", "Role"]
