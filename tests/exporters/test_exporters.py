"""The exporter seam: typed protocols checked when an exporter enters the collector, one registry that builds them."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from strands_tito.collector import Collector, CollectorConfig
from strands_tito.collector.ingest import IngestResult
from strands_tito.exporters import (
    AcknowledgingExporter,
    CheckedExporter,
    ExporterConfigError,
    ExporterRegistry,
    ExporterSettings,
    GatheringExporter,
    JsonlExporter,
    ParquetExporter,
    TrajectoryExporter,
    registry,
)
from strands_tito.records import ExportedRecord


class Memory:
    """A whole exporter: keeps what it is given."""

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self.batches: list[tuple[str, list[ExportedRecord]]] = []
        self.closed = False

    def next_position(self) -> str:
        return str(len(self.batches))

    def write(self, records: Sequence[ExportedRecord], position: str) -> None:
        self.batches.append((position, list(records)))

    def close(self) -> None:
        self.closed = True


class NoWrite:
    """Misses ``write`` (renamed, as a typo would)."""

    name = "no-write"

    def next_position(self) -> str:
        return "0"

    def wirte(self, records: Sequence[ExportedRecord], position: str) -> None:
        """A typo."""

    def close(self) -> None:
        """Nothing to release."""


class HalfAcknowledging(Memory):
    """Has ``ack_timeout`` and ``acknowledges`` but no ``deliver``: the collector would never be told of a delivery."""

    ack_timeout = 5.0

    def acknowledges(self, resource: Mapping[str, Any]) -> bool:
        return True


class Acknowledging(Memory):
    """The whole acknowledging capability; its batches take until ``finish`` is set, after each id is yielded."""

    ack_timeout = 5.0

    def __init__(self) -> None:
        super().__init__("acknowledging")
        self.finish = threading.Event()

    def acknowledges(self, resource: Mapping[str, Any]) -> bool:
        return True

    def deliver(self, records: Sequence[ExportedRecord], position: str) -> Iterator[str]:
        yield from (r["trajectory_id"] for r in records)
        self.finish.wait(10)
        self.write(records, position)


def config(tmp_path: Path, **changes: Any) -> CollectorConfig:
    return CollectorConfig(store=tmp_path / "store.db", http_port=0, grpc_port=0, progress_interval=0, **changes)


@pytest.mark.parametrize(
    ("exporter", "says"),
    [
        (NoWrite(), "NoWrite is not a TrajectoryExporter: it lacks write"),
        (object(), "object is not a TrajectoryExporter: it lacks close, name, next_position, write"),
        (HalfAcknowledging(), "has ack_timeout, acknowledges of AcknowledgingExporter but lacks deliver"),
    ],
)
def test_an_incomplete_exporter_is_refused_when_the_collector_is_given_it(
    tmp_path: Path, exporter: object, says: str
) -> None:
    with pytest.raises(ExporterConfigError) as raised:
        Collector(config(tmp_path), exporters=[Memory(), exporter])  # type: ignore[list-item]
    assert says in str(raised.value)


def test_an_incomplete_exporter_is_refused_when_the_registry_builds_it() -> None:
    kinds = ExporterRegistry()
    kinds.register("broken", lambda target, settings: NoWrite())
    kinds.register("whole", lambda target, settings: Memory(target))
    with pytest.raises(ExporterConfigError, match="NoWrite is not a TrajectoryExporter: it lacks write"):
        kinds.build("broken:x")
    assert isinstance(kinds.build("whole:x"), TrajectoryExporter)
    with pytest.raises(ValueError, match="unknown exporter 'nope' \\(known: broken, whole\\)"):
        kinds.build("nope:x")
    with pytest.raises(ValueError, match="taken"):
        kinds.register("whole", lambda target, settings: Memory())


def test_the_built_in_exporters_have_exactly_their_capabilities(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("agentlightning")
    settings = ExporterSettings(agl_journal=tmp_path / "agl.db", parquet_rows=7, parquet_linger=2.0)
    jsonl = registry.make_exporter(f"jsonl:{tmp_path / 'out.jsonl'}", settings)
    parquet = registry.make_exporter(f"parquet:{tmp_path / 'parquet'}", settings)
    agl = registry.make_exporter("agentlightning:http://127.0.0.1:9", settings)
    try:
        capabilities = {
            type(e).__name__: [p.__name__ for p in (GatheringExporter, CheckedExporter, AcknowledgingExporter)
                               if isinstance(e, p)]
            for e in (jsonl, parquet, agl)
        }  # fmt: skip
        assert capabilities == {
            "JsonlExporter": [],
            "ParquetExporter": ["GatheringExporter"],
            "AgentLightningExporter": ["CheckedExporter", "AcknowledgingExporter"],
        }
        assert isinstance(parquet, ParquetExporter) and (parquet.batch_rows, parquet.linger_seconds) == (7, 2.0)
        assert isinstance(agl, AcknowledgingExporter) and agl.ack_timeout == settings.agl_ack_timeout
    finally:
        for e in (jsonl, parquet, agl):
            e.close()


def test_the_collector_builds_every_exporter_with_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs and Agent Lightning alike: a kind registered once is usable as an output, and ``agl_url`` is a spec."""
    built: list[tuple[str, ExporterSettings]] = []
    kinds = ExporterRegistry()
    for kind in ("jsonl", "agentlightning", "memory"):
        kinds.register(kind, lambda target, settings, kind=kind: built.append((kind, settings)) or Memory(kind))
    monkeypatch.setattr(registry, "REGISTRY", kinds)
    c = Collector(
        config(tmp_path, outputs=["jsonl:x.jsonl", "memory:m"], agl_url="http://127.0.0.1:9", agl_ack_timeout=3.0)
    )
    try:
        assert [e.name for e in c.exporters] == ["jsonl", "memory", "agentlightning"]
        assert [kind for kind, _ in built] == ["jsonl", "memory", "agentlightning"]
        assert built[-1][1].agl_ack_timeout == 3.0 and built[-1][1].agl_journal == tmp_path / "agentlightning.db"
    finally:
        c.store.close()


async def test_the_acknowledgement_waits_for_what_deliver_yields_not_for_the_batch(tmp_path: Path) -> None:
    """The collector learns of each delivery from ``deliver`` (no callback set on the exporter): an agent is released
    as soon as its trajectory is yielded, well before ``ack_timeout``, while the rest of the batch still runs."""
    exporter = Acknowledging()
    c = Collector(config(tmp_path), exporters=[exporter])
    record: Any = {"trajectory_id": "t-1", "resource": {}}
    c.store.finish("t-1", record, [exporter.name])
    c.delivery.start()
    try:
        await asyncio.wait_for(c.delivery.hold(IngestResult(trajectories={"t-1": {}})), exporter.ack_timeout - 1)
        assert exporter.batches == []  # the batch is still being written
    finally:
        exporter.finish.set()
        c.delivery.stop(5)
        c.store.close()
    assert [records for _, records in exporter.batches] == [[record]]


def test_shared_jsonl_never_cuts_another_process_line(tmp_path: Path) -> None:
    """Embedded capture in several agent processes appends to one file: a shared JSONL exporter keeps every line,
    where the collector's own (which repairs an interrupted batch by truncating back to its position) would not."""
    path = tmp_path / "out.jsonl"
    for shared, kept in ((True, ["a", "b"]), (False, ["a"])):
        path.unlink(missing_ok=True)
        first, second = JsonlExporter(path, shared=shared), JsonlExporter(path, shared=shared)
        position = first.next_position()
        second.write([{"trajectory_id": "b"}], second.next_position())  # type: ignore[typeddict-item]
        first.write([{"trajectory_id": "a"}], position)  # type: ignore[typeddict-item]
        assert sorted(json.loads(line)["trajectory_id"] for line in path.read_text().splitlines()) == kept
