"""``strands-tito spool list|resend``: see and deliver the spans agent processes left in the disk spool.

A spool directory is tied to the service and the OTLP endpoint its spans were meant for (:mod:`.spool`), so spans
parked for a mistyped endpoint would wait for it forever. ``list`` shows what waits in each spool; ``resend --endpoint
URL`` sends it to a collector you name, oldest first, with the standard OTLP/HTTP exporter (``OTEL_EXPORTER_OTLP_*``
headers, compression and timeout apply), and removes each record once that collector acknowledged it. Spools a
running agent process holds are left alone.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from strands_tito import spans
from strands_tito.capture.spool import Spool, decode_request, default_spool_root

__all__ = ["spool_main"]


def _spools(root: Path, key: str | None) -> Iterator[Path]:
    if not root.is_dir():
        return
    for path in sorted(root.iterdir()):
        if path.is_dir() and not path.name.startswith(".") and (key is None or path.name == key):
            yield path


def _held_by_running_processes(spool: Spool) -> int:
    """Instances a live process still holds (the spool adopted every other one)."""
    return sum(1 for p in spool.parent.iterdir() if p.is_dir() and not p.name.startswith(".") and p != spool.dir)


def _list(root: Path, key: str | None) -> int:
    rows = []
    for directory in _spools(root, key):
        spool = Spool(directory)
        try:
            records = span_count = 0
            trajectories: set[str] = set()
            for payload in spool.records():
                records += 1
                for span in decode_request(payload):
                    span_count += 1
                    trajectories.add(str((span.attributes or {}).get(spans.TRAJECTORY_ID, "")))
            held = _held_by_running_processes(spool)
            rows.append((directory.name, records, span_count, len(trajectories), spool.pending_bytes, held))
        finally:
            spool.close()
    if not rows:
        print(f"nothing spooled under {root}")
        return 0
    print(f"spool {root}")
    print(f"{'spool (service-endpoint hash)':<44} {'records':>8} {'spans':>7} {'trajectories':>12} {'bytes':>12}")
    for name, records, span_count, trajectory_count, size, held in rows:
        note = f"  (+ {held} held by a running process)" if held else ""
        print(f"{name:<44} {records:>8} {span_count:>7} {trajectory_count:>12} {size:>12,}{note}")
    print("send them to a collector: strands-tito spool resend --endpoint http://HOST:4318 [--spool NAME]")
    return 0


def _traces_url(endpoint: str) -> str:
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


def _resend(root: Path, key: str | None, endpoint: str) -> int:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=_traces_url(endpoint))
    sent = failed = 0
    try:
        for directory in _spools(root, key):
            spool = Spool(directory)
            try:
                while (oldest := spool.peek()) is not None:
                    segment, end, payload = oldest
                    if exporter.export(decode_request(payload)) is not SpanExportResult.SUCCESS:
                        failed += 1
                        break
                    spool.ack(segment, end)
                    sent += 1
            finally:
                spool.close()
            if failed:
                print(
                    f"error: {_traces_url(endpoint)} did not accept the spool {directory.name}; {sent} record(s) "
                    "sent before it, the rest stay in the spool",
                    file=sys.stderr,
                )
                return 1
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    print(f"sent {sent} record(s) to {_traces_url(endpoint)}")
    return 0


def spool_main(argv: list[str] | None = None) -> int:
    """Entry point of ``strands-tito spool list|resend``."""
    parser = argparse.ArgumentParser(prog="strands-tito spool", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, default=None, help="the spool root (default: $STRANDS_TITO_SPOOL_DIR or ~/.cache/...)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="show what waits in each spool")
    listing.add_argument("--spool", metavar="NAME", help="only this spool (a name from the list)")
    resend = commands.add_parser("resend", help="send spooled spans to a collector and remove what it acknowledged")
    resend.add_argument("--endpoint", required=True, help="the collector's OTLP/HTTP URL, e.g. http://127.0.0.1:4318")
    resend.add_argument("--spool", metavar="NAME", help="only this spool (default: all)")
    args = parser.parse_args(argv)
    root = args.dir if args.dir is not None else default_spool_root()
    # Opening a spool adopts what dead processes left; its "resending ..." notice is for agents, not for this command.
    logging.getLogger("strands_tito.capture.spool").setLevel(logging.ERROR)
    if args.command == "list":
        return _list(root, args.spool)
    return _resend(root, args.spool, args.endpoint)
