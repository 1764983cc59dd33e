"""The collector under a connection flood: how many idle connections it holds, its memory per idle connection, and
how long ``/health`` takes while they are held.

One ``strands-tito collect`` process per checkout (HTTP on 127.0.0.1, default admission settings, ``--head-timeout
60`` so that the idle sockets stay for the run): ``--idle`` silent connections are opened at once, then, once the
collector has taken them (or refused what it would not hold), its RSS (``/proc/PID/status``) is read and ``/health``
is asked ``--probes`` times on fresh connections. ``--checkout DIR`` measures another checkout of the repository (its
core/, src/, collector/ and exporters/ first on the path) in the same run.

    python benchmarks/collector_connection_flood.py [--idle 10000] [--probes 20] [--checkout ../old-checkout]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import describe


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) if match else 0


def health(port: int) -> tuple[int, float]:
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError:
        return 0, time.perf_counter() - started
    status = int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, time.perf_counter() - started


def still_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        s.recv(1, socket.MSG_PEEK)  # an answer (503), or the end: not held
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def measure(checkout: Path | None, idle: int, probes: int) -> dict[str, str]:
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(checkout / d) for d in ("core", "src", "collector", "exporters"))
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "strands_tito.collector", "--http", "127.0.0.1:0", "--grpc", "off"]
        command += ["--store", tmp, "--jsonl", f"{tmp}/out.jsonl", "--progress-interval", "0", "--head-timeout", "60"]
        command += ["--log-level", "ERROR"]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        assert proc.stdout is not None
        port = 0
        while not port:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("collector did not start")
            match = re.search(r"listening on http://[\d.]+:(\d+)", line)
            port = int(match.group(1)) if match else 0
        try:
            time.sleep(0.5)
            before = rss_kib(proc.pid)
            sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(idle)]
            time.sleep(3.0)  # the collector takes the queued connections
            held = sum(still_open(s) for s in sockets)
            after = rss_kib(proc.pid)
            answers = [health(port) for _ in range(probes)]
            for s in sockets:
                s.close()
        finally:
            proc.terminate()
            proc.wait(30)
    times = sorted(t for _, t in answers)
    ok = sum(status == 200 for status, _ in answers)
    per = (after - before) / held if held else 0.0
    return {
        "held": f"{held:,} of {idle:,}",
        "rss": f"{before / 1024:.0f} -> {after / 1024:.0f} MiB",
        "per": f"{per:.1f} KiB",
        "health": f"{ok}/{probes} 200",
        "p50": f"{statistics.median(times) * 1000:.1f} ms",
        "max": f"{times[-1] * 1000:.1f} ms",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--checkout", type=Path, help="another checkout to measure in the same run")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows = [("this checkout", measure(None, args.idle, args.probes))]
    if args.checkout is not None:
        rows.append((str(args.checkout), measure(args.checkout, args.idle, args.probes)))
    print(f"machine: {describe()}; load average {os.getloadavg()[0]:.1f}")
    print("| code | idle connections held | collector RSS | per idle connection | /health | p50 | max |")
    print("|---|---|---|---|---|---|---|")
    for name, row in rows:
        cells = [name, *(row[key] for key in ("held", "rss", "per", "health", "p50", "max"))]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
