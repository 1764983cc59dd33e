"""Agent Lightning (v1.0): each model call of a trajectory as one ``model_request`` event of its rollout.

Agent Lightning's trainer reads a rollout's events from its server (``GET /api/rollouts/{id}/events?format=triplet``)
when the rollout ends. For every model call of a finished trajectory this exporter posts one ``model_request`` event
to ``/api/rollouts/{rollout_id}/attempt/{attempt_id}/events``, shaped like the gateway's own record of a vLLM chat
completion, so that the triplet view yields ``prompt_token_ids`` (everything the model was given for that call),
``response_token_ids`` (what it generated), ``response_log_probs`` (their logprobs), status ``ok`` and the served
model's name; each recorded reward becomes a ``reward`` event (the trainer uses the last one). The rollout and attempt
come from the trajectory's resource attributes (``agentlightning.rollout_id`` / ``agentlightning.attempt_id``, set
by capture under Agent Lightning's controller); trajectories without them are left to the other exporters.

Nothing is posted twice, even across a crash: every event carries a marker (``data.strands_tito``: trajectory id,
event index, event count) that the triplet view drops, and a small SQLite journal next to the collector's store
records, after each acknowledged POST, how many events of the trajectory are on the server. After a restart (or a
failed attempt) only the one event that may or may not have arrived is in doubt; the exporter looks for its marker
among the rollout's stored events before posting it again. Agent Lightning itself does not deduplicate events.

Failures: an unreachable or failing server (transport errors, 408/429/5xx) and a rejected key (401/403) fail the
batch, which the collector keeps in its store and retries with backoff; a rollout the server does not know (404) or an
event it refuses (422) is logged and skipped, so one bad rollout cannot hold up the others.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from strands_tito.errors import MissingDependencyError, StrandsTitoError
from strands_tito.records import AGL_ATTEMPT_ID, AGL_ROLLOUT_ID, LINEAGE_FIELDS, ExportedRecord, agl_identity_error

from .base import ExporterConfigError

logger = logging.getLogger(__name__)

MARKER = "strands_tito"
"""Key of the marker in each posted event's ``data`` (kept in the raw view, dropped by the triplet view)."""
NAME = "agentlightning"
#: The record's lineage fields every posted event's marker carries (several agents of one rollout tell apart there).
LINEAGE_KEYS = LINEAGE_FIELDS

_JOURNAL = """
CREATE TABLE IF NOT EXISTS progress (
    trajectory_id TEXT PRIMARY KEY,
    position TEXT NOT NULL,
    posted INTEGER NOT NULL
);
"""


class AgentLightningError(StrandsTitoError, RuntimeError):
    """The Agent Lightning server could not take the events now (the batch is retried later)."""


class AgentLightningAuthError(AgentLightningError):
    """The server refused the key (401/403)."""


class _Skip(Exception):
    """This trajectory's events cannot be posted at all (unknown rollout, refused event)."""


def _require_agentlightning() -> Any:
    try:
        from agentlightning import schemas
    except ImportError as e:  # pragma: no cover - depends on the environment
        missing = MissingDependencyError(
            "the Agent Lightning exporter", "agentlightning", "agentlightning", "strands-tito-collector"
        )
        raise ExporterConfigError(str(missing)) from e
    return schemas


def identity(resource: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(rollout_id, attempt_id)`` from a trajectory's resource attributes, or None when it was not made under Agent
    Lightning."""
    rollout = resource.get(AGL_ROLLOUT_ID)
    if not isinstance(rollout, str) or not rollout:
        return None
    attempt = resource.get(AGL_ATTEMPT_ID)
    return rollout, attempt if isinstance(attempt, str) and attempt else "0"


def _version(value: Any) -> int | None:
    """A weight version as Agent Lightning's integer model version, when it is one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _calls(record: ExportedRecord) -> list[dict[str, Any]]:
    """Every model call of a record as ``prompt``, ``output``, ``logprobs`` and what the server said."""
    if record.get("calls"):
        return [
            {
                "prompt": call["prompt_ids"],
                "output": call["output_ids"],
                "logprobs": call["output_logprobs"],
                "finish_reason": call["finish_reason"],
                "request_id": call.get("request_id"),
                "weight_version": None,
                "cached_tokens": None,
            }
            for call in record["calls"]
        ]
    ids, logprobs = record["token_ids"], record["logprobs"]
    images = record.get("image_data") or []
    seen = 0
    calls = []
    turns = record.get("turns", [])
    for turn in turns:
        seen += int(turn.get("images") or 0)
        start = turn["prompt_start"] + turn["prompt_length"]
        end = start + turn["output_length"]
        calls.append(
            {
                "prompt": ids[:start],  # the whole context the model was given for this call
                "output": ids[start:end],
                "logprobs": None if logprobs is None else logprobs[start:end],
                "finish_reason": turn["finish_reason"],
                "request_id": turn.get("request_id"),
                "weight_version": turn.get("weight_version"),
                "weight_versions": turn.get("weight_versions") or [],
                "cached_tokens": turn.get("cached_tokens"),
                "images": images[:seen],  # every image of the prompt, in order
            }
        )
    if calls and record.get("routed_experts"):
        # R3: every turn's prompt extends the one before's prompt + output, so all calls form one chain, and Agent
        # Lightning keeps routing only on a chain's last event (it deletes it from the one before as each event
        # arrives), reading it as the whole sequence from position 0: the record's (len - 1, layers, top_k) .npy.
        calls[-1]["routed_experts"] = record["routed_experts"]
    return calls


def _model_request(schemas: Any, tid: str, index: int, call: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The ``model_request`` event body of call ``index`` of trajectory ``tid`` (one of :func:`_calls`)."""
    prompt, output = list(call["prompt"]), list(call["output"])
    logprobs = call["logprobs"]
    version = _version(call["weight_version"])
    usage: dict[str, Any] = {
        "prompt_tokens": len(prompt),
        "completion_tokens": len(output),
        "total_tokens": len(prompt) + len(output),
    }
    if call["cached_tokens"]:
        usage["prompt_tokens_details"] = {"cached_tokens": call["cached_tokens"]}

    choice: dict[str, Any] = {
        "index": 0,
        "finish_reason": call["finish_reason"],
        "token_ids": output,
        # Recorded without logprobs: null, as an OpenAI choice that did not ask for them (never numbers made up).
        "logprobs": None
        if logprobs is None
        else {"content": [{"logprob": None if v is None or not math.isfinite(v) else float(v)} for v in logprobs]},
    }
    if call.get("weight_versions"):
        # Which weights sampled which of these tokens, in vLLM's own choice field (vllm/outputs.py:49-56).
        choice["weight_versions"] = call["weight_versions"]
    request_body: dict[str, Any] = {"model": name}
    if call.get("images"):
        # Agent Lightning aligns a multimodal call's images through the request's messages
        # (messages[].content[].image_url.url, in order); the text is in prompt_token_ids.
        parts = [{"type": "image_url", "image_url": {"url": url}} for url in call["images"]]
        request_body["messages"] = [{"role": "user", "content": parts}]
    request = schemas.ModelRequestData(
        model=name,
        model_version=version,
        request=request_body,
        response={
            "id": call["request_id"] or f"{tid}-{index}",
            "object": "chat.completion",
            "model": name,
            "prompt_token_ids": prompt,
            "choices": [choice],
            "usage": usage,
        },
        http_status=200,
        status="ok",
        usage=usage,
        finish_reason=call["finish_reason"],
    )
    data: dict[str, Any] = request.model_dump(mode="json", exclude_none=True)
    data["server"] = {"model": name, "version": version}  # what the triplet view reports per call
    if call.get("routed_experts") is not None:
        data["routed_experts"] = call["routed_experts"]
    return data


def build_events(record: ExportedRecord, model: str | None = None) -> list[dict[str, Any]]:
    """The events for one trajectory record, in order, as validated ``EventCreate`` bodies.

    A complete record gives one ``model_request`` per model call, then one ``reward`` per recorded reward (the
    trainer takes the last). An incomplete record gives a single ``strands_tito.incomplete`` event with the reason
    instead: its calls are not trusted for training (the triplet view passes the event through; the trainer ignores
    it).

    Args:
        record: The trajectory record.
        model: The model name to report; default: the record's ``model_id``.
    """
    schemas = _require_agentlightning()
    tid = record["trajectory_id"]
    bodies: list[tuple[str, dict[str, Any]]] = []
    if not record.get("complete"):
        bodies.append(("strands_tito.incomplete", {"reason": record.get("reason")}))
    else:
        name = model or record.get("model_id") or "unknown"
        for index, call in enumerate(_calls(record)):
            bodies.append(("model_request", _model_request(schemas, tid, index, call, name)))
        for value in record.get("rewards") or []:
            reward = schemas.RewardData(value=float(value), source="agent")
            bodies.append(("reward", reward.model_dump(mode="json", exclude_none=True)))
    events = []
    lineage = {key: record.get(key) for key in LINEAGE_KEYS if record.get(key) is not None}
    for index, (event_type, data) in enumerate(bodies):
        data[MARKER] = {"trajectory_id": tid, "event": index, "events": len(bodies), **lineage}
        events.append(schemas.EventCreate(event_type=event_type, data=data).model_dump(mode="json"))
    return events


class AgentLightningExporter:
    """Posts trajectories to an Agent Lightning (v1.0) server as ``model_request`` and ``reward`` events.

    Args:
        url: The server's base URL (``http://127.0.0.1:8080``).
        key: The server's key (sent as ``Authorization: Bearer``; empty for a server without one).
        journal: SQLite file recording per-trajectory progress (created).
        ack_timeout: How long the collector may hold an agent's OTLP acknowledgement for a trajectory that ended in
            it, until its events are on the server (0: no holding).
        model: Model name to report instead of each record's ``model_id``.
        timeout: Seconds per HTTP request.
        transport: An ``httpx`` transport (tests).
    """

    def __init__(
        self,
        url: str,
        key: str | None,
        journal: str | Path,
        *,
        ack_timeout: float = 8.0,
        model: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        _require_agentlightning()
        from agentlightning.client import AgentLightningSyncClient

        self.name = NAME
        self.url = url.rstrip("/")
        self.ack_timeout = ack_timeout
        self.model = model
        # max_retries=0: AgentLightningSyncClient.get would otherwise retry by itself; retries belong to the
        # collector's backoff.
        self._client = AgentLightningSyncClient(
            base_url=self.url, key=key or None, timeout=timeout, max_retries=0, transport=transport
        )
        self._journal_path = Path(journal)
        self._journal_path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self._journal_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_JOURNAL)
        self._lock = threading.Lock()
        self._absent: dict[str, int] = {}  # event known not to be stored (the server answered 4xx), per trajectory

    # -- the exporter contract (with CheckedExporter and AcknowledgingExporter) ---------------------------------------

    def acknowledges(self, resource: Mapping[str, Any]) -> bool:
        """Whether spans with this resource belong to an Agent Lightning rollout (their delivery gates the ack)."""
        return identity(resource) is not None

    def check(self) -> None:
        """Probe the server once at start-up: a rejected key or a URL that is not Agent Lightning stops the collector.

        An unreachable server is only logged: events wait in the store until it is up.

        Raises:
            ExporterConfigError: the key is refused, or the URL serves no Agent Lightning API.
        """
        try:
            response = self._client.get("/api/rollouts", params={"state_in": "running", "limit": 1})
        except httpx.HTTPError as e:
            logger.warning(
                "url=<%s>, error=<%s> | Agent Lightning server not reachable; events wait in the store", self.url, e
            )
            return
        if response.status_code in (401, 403):
            raise ExporterConfigError(
                f"the Agent Lightning server at {self.url} refused the key given by --agl-key "
                f"(HTTP {response.status_code}: {_detail(response)})"
            )
        if response.status_code == 404:
            raise ExporterConfigError(
                f"{self.url} serves no Agent Lightning API (GET /api/rollouts: 404); --agl-url wants the server's base "
                "URL, e.g. http://127.0.0.1:8080"
            )
        if response.status_code >= 400:
            logger.warning(
                "url=<%s>, status=<%d> | Agent Lightning server answered the probe with an error",
                self.url,
                response.status_code,
            )

    def next_position(self) -> str:
        """A fresh batch id (progress is kept per trajectory in the journal)."""
        return uuid.uuid4().hex

    def write(self, records: Sequence[ExportedRecord], position: str) -> None:
        """Post every event of every Agent Lightning trajectory in ``records`` not yet on the server, in order.

        Raises:
            AgentLightningError: as :meth:`deliver`.
        """
        for _ in self.deliver(records, position):
            pass

    def deliver(self, records: Sequence[ExportedRecord], position: str) -> Iterator[str]:
        """:meth:`write`, yielding the id of each Agent Lightning trajectory once all its events are on the server
        (or it was skipped for good: an unknown rollout, a refused event).

        Raises:
            AgentLightningError: the server is unreachable, failing or refusing the key; what was posted is recorded,
                and the collector retries the batch later.
        """
        with self._lock:
            # The collector writes one batch at a time and retries a batch until it is done, so the journal only
            # needs this batch's rows (a crash between the last POST and the collector's commit re-writes the same
            # batch at the same position, and the rows say everything is posted).
            self._db.execute("DELETE FROM progress WHERE position != ?", (position,))
        for record in records:
            ids = identity(record.get("resource") or {})
            if ids is None:
                continue
            tid = record["trajectory_id"]
            try:
                bad_identity = agl_identity_error(record.get("resource") or {})
                if bad_identity is not None:  # the collector refuses these at ingest; a record from an older store
                    raise _Skip(bad_identity)
                self._deliver(tid, ids[0], ids[1], build_events(record, self.model), position)
            except _Skip as e:
                logger.error(
                    "trajectory_id=<%s>, rollout_id=<%r>, reason=<%s> | events not posted to Agent Lightning",
                    tid,
                    ids[0],
                    e,
                )
                self._set_posted(tid, position, -1)
                self._absent.pop(tid, None)
            yield tid

    def close(self) -> None:
        """Close the HTTP client and the journal."""
        self._client.close()
        with self._lock:
            self._db.close()

    # -- delivery ----------------------------------------------------------------------------------------------------

    def _posted(self, tid: str) -> int | None:
        with self._lock:
            row = self._db.execute("SELECT posted FROM progress WHERE trajectory_id = ?", (tid,)).fetchone()
        return None if row is None else int(row[0])

    def _set_posted(self, tid: str, position: str, posted: int) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO progress VALUES (?, ?, ?) "
                "ON CONFLICT (trajectory_id) DO UPDATE SET posted = excluded.posted",
                (tid, position, posted),
            )

    def _deliver(self, tid: str, rollout: str, attempt: str, events: list[dict[str, Any]], position: str) -> None:
        posted = self._posted(tid)
        if posted is None:
            self._set_posted(tid, position, 0)  # from here on, event 0 may be on the server
            posted = 0
        elif posted < 0 or posted >= len(events):
            return  # done (or skipped) in an earlier attempt
        elif self._absent.get(tid) != posted:
            posted = self._resolve(tid, rollout, attempt, events, posted)
            self._set_posted(tid, position, posted)
        path = f"/api/rollouts/{quote(rollout, safe='')}/attempt/{quote(attempt, safe='')}/events"
        for index in range(posted, len(events)):
            try:
                response = self._client.post(
                    path, content=orjson.dumps(events[index]), headers={"content-type": "application/json"}
                )
            except httpx.HTTPError as e:
                raise AgentLightningError(f"POST {self.url}{path} failed: {type(e).__name__}: {e}") from e
            if 300 <= response.status_code < 500:
                self._absent[tid] = index  # refused: the event is not stored, no need to look for it on a retry
            self._check(response, f"POST {path}")
            self._set_posted(tid, position, index + 1)
            self._absent.pop(tid, None)

    def _check(self, response: httpx.Response, what: str) -> None:
        """Raise what an error answer means for delivery."""
        status = response.status_code
        if status < 300:
            return
        if status in (401, 403):
            raise AgentLightningAuthError(
                f"the Agent Lightning server at {self.url} refused the key given by --agl-key "
                f"(HTTP {status}: {_detail(response)}); fix the key and restart the collector"
            )
        detail = _detail(response)
        if status == 404 and detail.startswith("Rollout not found"):
            raise _Skip(f"{what}: {detail}")
        if status in (400, 413, 422):
            raise _Skip(f"{what}: HTTP {status}: {detail}")
        raise AgentLightningError(f"{what}: HTTP {status}: {detail}")

    def _resolve(self, tid: str, rollout: str, attempt: str, events: list[dict[str, Any]], posted: int) -> int:
        """How many events are on the server, when event ``posted`` may or may not have arrived (sent, no answer)."""
        try:
            response = self._client.get(f"/api/rollouts/{quote(rollout, safe='')}")
            self._check(response, f"GET /api/rollouts/{rollout}")
            state = response.json()
            visible = (state.get("rollout") or {}).get("status", {}).get("last_attempt_id") or "0"
            if visible != attempt:
                # The server lists only the current attempt's events; this attempt's cannot be checked, and the
                # trainer does not read them either. Post again (an identical prompt collapses in the triplet view).
                logger.warning(
                    "rollout_id=<%s>, attempt_id=<%s> | attempt not readable on the server; event %d posted again",
                    rollout,
                    attempt,
                    posted,
                )
                return posted
            event_type = events[posted]["event_type"]
            response = self._client.get(
                f"/api/rollouts/{quote(rollout, safe='')}/events", params={"event_type": event_type}
            )
            self._check(response, f"GET /api/rollouts/{rollout}/events")
        except httpx.HTTPError as e:
            raise AgentLightningError(f"GET {self.url}/api/rollouts/{rollout} failed: {type(e).__name__}: {e}") from e
        for event in response.json():
            marker = (event.get("data") or {}).get(MARKER) or {}
            if marker.get("trajectory_id") == tid and marker.get("event") == posted:
                logger.info("trajectory_id=<%s>, event=<%d> | already on the server; not posted again", tid, posted)
                return posted + 1
        return posted


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:500]
    return str(body)[:200]
