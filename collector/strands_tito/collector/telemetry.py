"""What the collector says about itself: counters for ``/metrics`` and the health of its background tasks."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass
class Metrics:
    """Counters exposed at ``/metrics`` (Prometheus text format)."""

    requests: dict[str, int] = field(default_factory=dict)
    spans_received: int = 0
    bytes_received: int = 0
    spans_rejected: int = 0
    duplicates: int = 0
    export_failures: dict[str, int] = field(default_factory=dict)
    exported: dict[str, int] = field(default_factory=dict)
    task_failures: dict[str, int] = field(default_factory=dict)

    def count_request(self, protocol: str, outcome: str) -> None:
        """One request answered."""
        key = f'protocol="{protocol}",outcome="{outcome}"'
        self.requests[key] = self.requests.get(key, 0) + 1


class Health:
    """Which supervised background tasks are failing right now (``/health`` says ``degraded`` while any is).

    A task reports every round: :meth:`failed` with the exception (logged with its traceback, counted in
    ``metrics.task_failures``), :meth:`ok` when a round succeeds again.
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._failing: dict[str, str] = {}
        self._lock = threading.Lock()

    def ok(self, task: str) -> None:
        """A round of ``task`` succeeded."""
        if task in self._failing:
            with self._lock:
                if self._failing.pop(task, None) is not None:
                    logger.warning("task=<%s> | recovered", task)

    def failed(self, task: str, error: BaseException, *, logged: bool = False) -> None:
        """A round of ``task`` failed; the task goes on. ``logged``: the caller already logged one line for it (an
        expected failure, such as an export to a full disk: no traceback)."""
        with self._lock:
            self._failing[task] = f"{type(error).__name__}: {error}"[:500]
            self.metrics.task_failures[task] = self.metrics.task_failures.get(task, 0) + 1
        if not logged:
            logger.error("task=<%s> | background task failed; it keeps running", task, exc_info=error)

    @property
    def failing(self) -> dict[str, str]:
        """Failing tasks and their last error."""
        with self._lock:
            return dict(self._failing)


def prometheus(metrics: Metrics, gauges: dict[str, int], trajectories: dict[str, int]) -> str:
    """Metrics in the Prometheus text exposition format."""
    lines = [
        "# TYPE strands_tito_spans_received_total counter",
        f"strands_tito_spans_received_total {metrics.spans_received}",
        "# TYPE strands_tito_bytes_received_total counter",
        f"strands_tito_bytes_received_total {metrics.bytes_received}",
        "# TYPE strands_tito_spans_rejected_total counter",
        f"strands_tito_spans_rejected_total {metrics.spans_rejected}",
        "# TYPE strands_tito_spans_duplicate_total counter",
        f"strands_tito_spans_duplicate_total {metrics.duplicates}",
        "# TYPE strands_tito_trajectories_total counter",
        f'strands_tito_trajectories_total{{complete="true"}} {trajectories["complete"]}',
        f'strands_tito_trajectories_total{{complete="false"}} {trajectories["incomplete"]}',
    ]
    for name, value in gauges.items():
        lines += [f"# TYPE strands_tito_{name} gauge", f"strands_tito_{name} {value}"]
    lines.append("# TYPE strands_tito_requests_total counter")
    lines += [f"strands_tito_requests_total{{{k}}} {v}" for k, v in sorted(metrics.requests.items())]
    for name, label, counts in (
        ("export_failures_total", "exporter", metrics.export_failures),
        ("exported_total", "exporter", metrics.exported),
        ("task_failures_total", "task", metrics.task_failures),
    ):
        lines.append(f"# TYPE strands_tito_{name} counter")
        lines += [f'strands_tito_{name}{{{label}="{k}"}} {v}' for k, v in sorted(counts.items())]
    return "\n".join(lines) + "\n"
