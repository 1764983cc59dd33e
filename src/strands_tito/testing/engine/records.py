"""What the engine keeps of every exchange (:class:`EngineRecord`) and the wire helpers all endpoints share.

The helpers build the bytes the tests pin: SSE events (``data: {...}\\n\\n`` with compact JSON), the ``[DONE]``
terminator, and the two serialization-level faults (a non-JSON 502 page served as JSON, a body cut in half).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Final

from strands_tito.testing.http_server import RawResponse, Response, StreamResponse

__all__ = [
    "DISCONNECTED_STATUS",
    "NON_JSON_BODY",
    "NO_SCRIPT_MESSAGE",
    "SSE_DONE",
    "EngineRecord",
    "new_record",
    "parse_body",
    "parse_response_body",
    "sse_event",
    "sse_stream",
    "truncated_json",
]

NO_SCRIPT_MESSAGE: Final[str] = "strands-tito engine: no scripted reply for this request"
#: Status recorded for a request whose client hung up before the reply (nothing is sent).
DISCONNECTED_STATUS: Final[int] = 499
#: The body of the ``non_json`` malformed fault: what a misbehaving proxy in front of the server might send.
NON_JSON_BODY: Final[str] = "<html><body><h1>502 Bad Gateway</h1>upstream sent an invalid response</body></html>"
SSE_DONE: Final[bytes] = b"data: [DONE]\n\n"


@dataclass
class EngineRecord:
    """One request the engine received and what it answered.

    Attributes:
        rid: the request id (``meta_info.id``) for ``/generate``; the aborted rid for ``/abort_request``.
        path, method: the HTTP route.
        request: the parsed JSON body (raw text if it was not JSON; None if empty).
        status: the HTTP status sent (499 when the client disconnected first and nothing was sent).
        response: the parsed JSON body, the raw text, or for SSE the list of parsed events (``"[DONE]"`` last).
        input_ids: the prompt token ids the engine received (after tokenizing ``text`` input).
        output_ids: the token ids the engine generated (also for malformed or aborted replies).
        output_logprobs: the engine's logprob for each output id.
        conversation: the conversation index (0, 1, ...) the request was attributed to.
        cached_tokens: the ``meta_info.cached_tokens`` reported.
        disconnected: the client went away before the reply.
        fault: the injected fault (``"http:503"``, ``"malformed:nan_logprob"``, ...), if any.
        unscripted: answered with the default reply (or the no-script 400) because no scripted step was left.
        script: index of the script the conversation is following (in order of addition), if any.
        received_at: ``time.time()`` when the request arrived.
        image_data: the ``image_data`` list the request carried (data URLs, in order), if any.
    """

    rid: str | None
    path: str
    method: str
    request: Any
    status: int
    response: Any
    input_ids: list[int] | None = None
    output_ids: list[int] | None = None
    output_logprobs: list[float | None] | None = None
    conversation: int | None = None
    cached_tokens: int | None = None
    disconnected: bool = False
    fault: str | None = None
    unscripted: bool = False
    script: int | None = None
    received_at: float = 0.0
    image_data: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of all fields."""
        return dataclasses.asdict(self)


def parse_body(body: bytes) -> Any:
    """A request body as the record keeps it: parsed JSON, else the text, None when empty."""
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")


def parse_response_body(response: Response) -> Any:
    """A response body as the record keeps it: parsed JSON when it is JSON, else the text."""
    if not response.body:
        return ""
    if (response.content_type or "").startswith("application/json"):
        try:
            return json.loads(response.body)
        except ValueError:
            pass
    return response.body.decode("utf-8", errors="replace")


def new_record(path: str, method: str, body: bytes, received: float) -> EngineRecord:
    """A fresh record of a request that has not been answered yet."""
    return EngineRecord(
        rid=None, path=path, method=method, request=parse_body(body), status=0, response=None, received_at=received
    )


def sse_event(payload: Any, *, allow_nan: bool = False) -> bytes:
    """One ``data: ...`` event with compact JSON."""
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan)
    return f"data: {data}\n\n".encode()


async def _iterate(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def sse_stream(chunks: Iterable[bytes]) -> StreamResponse:
    """A streamed response that sends ``chunks`` as they are (the caller adds :data:`SSE_DONE`)."""
    return StreamResponse(_iterate(list(chunks)))


def truncated_json(response: Response) -> tuple[str, RawResponse]:
    """The ``truncated_body`` fault of a JSON answer: the head promises the full length, half the body follows.

    Returns the half as text (for the record) and the raw response.
    """
    half = response.body[: len(response.body) // 2]
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        f"content-length: {len(response.body)}\r\nserver: strands-tito-engine\r\n\r\n"
    ).encode()
    return half.decode("utf-8", errors="replace"), RawResponse(head + half)
