"""Owns the bundle of long-lived service objects the lifespan builds and handlers share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.settings import Settings

if TYPE_CHECKING:
    from service.engine_service import EngineService
    from service.hub import Hub
    from service.metrics import Metrics
    from storage import Store


@dataclass
class ServiceState:
    settings: Settings
    store: Store
    hub: Hub
    engine: EngineService
    metrics: Metrics
    ready: bool = False
