"""Images token-in/token-out: Qwen3.5's real template, a real Strands tool returning an image, the local engine over
HTTP, span capture and the exporters.

The stand-in Qwen3.5 tokenizer (:func:`strands_tito.testing.family_tokenizers.family_tokenizer`) has the real template
and the real Qwen vision tokens (``<|vision_start|><|image_pad|><|vision_end|>``); the engine accepts ``image_data``
when started with ``image_understanding=True`` and records what it received.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest
from strands import tool
from transformers import PreTrainedTokenizerBase

from strands_tito import ImagesNotSupportedError, PromptError, VLLMModel
from strands_tito import spans as schema
from strands_tito.providers.sglang import parse_reply
from strands_tito.span_images import encode_images
from strands_tito.testing.engine import Reply, Script
from strands_tito.testing.family_tokenizers import family_tokenizer
from strands_tito.trajectory import Trajectory, TrajectoryError

from ..helpers.agents import SYSTEM, assert_matches_engine, generate_records, make_agent, make_model
from ..helpers.capture import assemble, assert_same, from_memory

USER_IMAGE = b"\x89PNG\r\n\x1a\nuser-image-bytes"
TOOL_IMAGE = b"\xff\xd8\xffjpeg-from-the-tool" * 50
USER_URL = "data:image/png;base64," + base64.b64encode(USER_IMAGE).decode()
TOOL_URL = "data:image/jpeg;base64," + base64.b64encode(TOOL_IMAGE).decode()
CALL = "<tool_call>\n<function=snapshot>\n<parameter=name>\nchart\n</parameter>\n</function>\n</tool_call>"


@tool
def snapshot(name: str) -> dict[str, Any]:
    """Take a snapshot of a named chart.

    Args:
        name: Which chart.
    """
    return {"status": "success", "content": [{"image": {"format": "jpeg", "source": {"bytes": TOOL_IMAGE}}}]}


@pytest.fixture(scope="module")
def qwen35() -> PreTrainedTokenizerBase:
    return family_tokenizer("qwen3.5")


def user_prompt() -> list[Any]:
    return [{"text": "What does this show?"}, {"image": {"format": "png", "source": {"bytes": USER_IMAGE}}}]


def replies() -> Script:
    return Script(turns=[Reply(text=CALL + "<|im_end|>", eos=False), Reply(text="A cat.<|im_end|>", eos=False)])


def start(start_engine, qwen35, **kwargs: Any):  # type: ignore[no-untyped-def]
    stops = [qwen35.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    return start_engine(replies(), tokenizer=qwen35, eos_token_ids=stops, **kwargs)


async def run_episode(start_engine, qwen35):  # type: ignore[no-untyped-def]
    engine = start(start_engine, qwen35, image_understanding=True)
    model = make_model(engine, qwen35, tool_parser="qwen_xml", enable_thinking=False)
    agent = make_agent(model, [snapshot], system_prompt=SYSTEM)
    result = await agent.invoke_async(user_prompt())
    return engine, model, agent, result


async def test_images_in_first_prompt_and_tool_result(start_engine, qwen35) -> None:  # type: ignore[no-untyped-def]
    engine, model, agent, result = await run_episode(start_engine, qwen35)
    assert str(result).strip() == "A cat."
    trajectory = model.trajectory
    records = generate_records(engine)
    # Token for token what the engine received and produced.
    assert_matches_engine(trajectory, records)
    # Each request sent the images of its whole prompt, in prompt order; each was encoded once onto the trajectory.
    assert [r.image_data for r in records] == [[USER_URL], [USER_URL, TOOL_URL]]
    assert trajectory.image_data == [USER_URL, TOOL_URL]
    assert [t.image_data for t in trajectory.turns] == [(USER_URL,), (TOOL_URL,)]
    # One placeholder per image, left for the server to expand.
    pad = qwen35.convert_tokens_to_ids("<|image_pad|>")
    assert [(r.input_ids or []).count(pad) for r in records] == [1, 2]
    # Template fidelity: the second request is the real template's rendering of the structured conversation.
    call_id = next(b["toolUse"]["toolUseId"] for m in agent.messages for b in m["content"] if "toolUse" in b)
    call = {"id": call_id, "type": "function", "function": {"name": "snapshot", "arguments": {"name": "chart"}}}
    structured = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [{"type": "text", "text": "What does this show?"}, {"type": "image"}]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "name": "snapshot", "content": [{"type": "image"}]},
    ]
    tools = [{"type": "function", "function": {"name": "snapshot", **_schema()}}]
    text = qwen35.apply_chat_template(
        structured, tools=tools, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    assert records[1].input_ids == qwen35.encode(text, add_special_tokens=False)
    assert trajectory.to_dict()["image_data"] == [USER_URL, TOOL_URL]
    assert [t["images"] for t in trajectory.to_dict()["turns"]] == [1, 1]


def _schema() -> dict[str, Any]:
    spec = snapshot.tool_spec
    return {"description": spec["description"], "parameters": spec["inputSchema"]["json"]}


async def test_capture_carries_images_to_the_record(start_engine, qwen35, memory) -> None:  # type: ignore[no-untyped-def]
    _, model, _, _ = await run_episode(start_engine, qwen35)
    original = model.trajectory
    model.reset()
    record = assemble(from_memory(memory), {original.trajectory_id})[original.trajectory_id]
    assert record.complete, record.reason
    assert_same(record.trajectory, original)
    assert record.trajectory.image_data == [USER_URL, TOOL_URL]
    assert record.to_dict()["image_data"] == [USER_URL, TOOL_URL]

    pytest.importorskip("agentlightning")
    from strands_tito.exporters.agentlightning import build_events

    requests = [e["data"]["request"] for e in build_events(record.to_dict()) if e["event_type"] == "model_request"]
    urls = [[p["image_url"]["url"] for m in r["messages"] for p in m["content"]] for r in requests]
    assert urls == [[USER_URL], [USER_URL, TOOL_URL]]


async def test_oversized_image_is_captured_as_hash_and_record_is_incomplete(  # type: ignore[no-untyped-def]
    start_engine, qwen35, memory, monkeypatch
) -> None:
    monkeypatch.setenv("STRANDS_TITO_MAX_IMAGE_BYTES", str(len(TOOL_IMAGE) - 1))
    _, model, _, _ = await run_episode(start_engine, qwen35)
    original = model.trajectory
    model.reset()
    record = assemble(from_memory(memory), {original.trajectory_id})[original.trajectory_id]
    assert not record.complete
    assert "turn 1: images [0] were over the capture size limit" in (record.reason or "")
    assert record.trajectory.image_data == [USER_URL]  # the turns before it are kept


async def test_model_without_image_understanding_refuses_before_sending(start_engine, qwen35) -> None:  # type: ignore[no-untyped-def]
    engine = start(start_engine, qwen35)  # reports has_image_understanding: false
    model = make_model(engine, qwen35, tool_parser="qwen_xml", enable_thinking=False)
    agent = make_agent(model, [snapshot], system_prompt=SYSTEM)
    with pytest.raises(ImagesNotSupportedError, match="has_image_understanding false"):
        await agent.invoke_async(user_prompt())
    assert [r.path for r in engine.records] == ["/model_info"]
    assert len(model.trajectory) == 0


async def test_text_only_template_refuses_images_before_sending(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(replies(), image_understanding=True)
    model = make_model(engine, qwen3)
    agent = make_agent(model)
    with pytest.raises(PromptError, match="renders no image placeholder"):
        await agent.invoke_async(user_prompt())
    assert engine.records == []


async def test_vllm_model_refuses_images_before_sending(start_engine, qwen35) -> None:  # type: ignore[no-untyped-def]
    engine = start(start_engine, qwen35, image_understanding=True)
    model = VLLMModel(tokenizer=qwen35, base_url=engine.base_url, model_id="m", tool_parser="qwen_xml")
    agent = make_agent(model)  # type: ignore[arg-type]
    with pytest.raises(ImagesNotSupportedError, match="VLLMModel does not send images"):
        await agent.invoke_async(user_prompt())
    assert engine.records == []


async def test_engine_checks_image_data(start_engine, qwen35) -> None:  # type: ignore[no-untyped-def]
    import httpx

    engine = start(start_engine, qwen35, image_understanding=True)
    pad = qwen35.convert_tokens_to_ids("<|image_pad|>")
    async with httpx.AsyncClient(base_url=engine.base_url) as client:
        info = (await client.get("/model_info")).json()
        assert info["has_image_understanding"] is True
        for ids, images, message in (
            ([1, 2, 3], [USER_URL], "holds 0 image placeholder tokens for 1 images"),
            ([1, pad, 3], ["http://example.com/x.png"], "not a base64 image data URL"),
        ):
            reply = await client.post("/generate", json={"input_ids": ids, "image_data": images})
            assert reply.status_code == 400 and message in reply.json()["error"]["message"]
    assert [r.image_data for r in generate_records(engine)] == []
    assert [r.image_data for r in engine.generate_records()] == [[USER_URL], ["http://example.com/x.png"]]


def test_append_turn_validates_images_and_leaves_nothing_behind() -> None:
    trajectory = Trajectory()
    for images, token_id, message in (
        (["http://example.com/x.png"], None, "not a base64 image data URL"),
        ([USER_URL, USER_URL], 7, "hold 1 image placeholders for 2 images"),
    ):
        with pytest.raises(TrajectoryError, match=message):
            trajectory.append_turn([1, 7, 2], [3], finish_reason="stop", image_data=images, image_token_id=token_id)
        assert len(trajectory) == 0 and trajectory.image_data == [] and not trajectory.turns
    trajectory.append_turn([1, 7, 2], [3], finish_reason="stop", image_data=[USER_URL], image_token_id=7)
    assert trajectory.image_data == [USER_URL]


def test_span_images_are_validated_at_decode() -> None:
    attributes = schema.turn_attributes(
        "t" * 32, 0, 0, 0, [1, 7], [None, None], [3], [-0.5], finish_reason="stop", images=None
    )
    value, omitted = encode_images([USER_URL], 7, 1 << 20)
    assert omitted == []
    decoded = schema.decode_span({**attributes, schema.IMAGES: value})
    assert isinstance(decoded, schema.TurnSpan) and decoded.images[0].data_url() == USER_URL
    tampered = value[:-1] + bytes([value[-1] ^ 1])
    (length,) = struct.unpack_from("<I", value)
    for bad, message in (
        (tampered, "do not match its size and sha256"),
        (value + b"x", "bytes no image accounts for"),
        (value[: 4 + length], "do not match"),
        ("not bytes", "must be bytes"),
    ):
        with pytest.raises(schema.SpanSchemaError, match=message):
            schema.decode_span({**attributes, schema.IMAGES: bad}, unpack=False)
    other, _ = encode_images([USER_URL, USER_URL], 7, 1 << 20)
    with pytest.raises(schema.SpanSchemaError, match="placeholder count"):
        schema.decode_span({**attributes, schema.IMAGES: other})


def test_reply_with_expanded_image_tokens_is_accepted() -> None:
    reply = {
        "text": "ok",
        "output_ids": [5],
        "meta_info": {"finish_reason": {"type": "stop"}, "prompt_tokens": 40, "output_token_logprobs": [[-0.1, 5]]},
    }
    # SGLang counts the prompt after expanding each image placeholder.
    assert parse_reply(reply, [1, 7, 2], 3, -1, want_logprobs=True, want_routed=False, expanded=True).output_ids == [5]
    with pytest.raises(Exception, match="server counted 40 prompt tokens"):
        parse_reply(reply, [1, 7, 2], 3, -1, want_logprobs=True, want_routed=False)


def test_parquet_has_an_image_data_column(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pq = pytest.importorskip("pyarrow.parquet")
    from strands_tito.assembly import TrajectoryRecord
    from strands_tito.exporters.parquet import ParquetExporter

    trajectory = Trajectory()
    trajectory.append_turn([1, 7, 2], [3], finish_reason="stop", image_data=[USER_URL], image_token_id=7)
    record = TrajectoryRecord(trajectory.trajectory_id, trajectory, complete=True).to_dict()
    exporter = ParquetExporter(tmp_path)
    exporter.write([record], exporter.next_position())
    table = pq.read_table(next(tmp_path.glob("part-*.parquet")))
    assert table.column("image_data").to_pylist() == [[USER_URL]]


async def test_collector_ingest_carries_images_and_rejects_bad_ones(  # type: ignore[no-untyped-def]
    start_engine, qwen35, memory, tmp_path
) -> None:
    from strands_tito.collector.ingest import Ingestor
    from strands_tito.collector.store import Store

    from ..helpers.otlp import make_request, make_span

    _, model, _, _ = await run_episode(start_engine, qwen35)
    original = model.trajectory
    model.reset()
    items = [
        (s.name, dict(s.attributes or {}))
        for s in memory.get_finished_spans()
        if (s.attributes or {}).get(schema.TRAJECTORY_ID) == original.trajectory_id
    ]
    ingestor = Ingestor(Store(tmp_path / "store.db"), ["jsonl"])
    # A turn whose image bytes were altered on the way is refused at ingest.
    name, attributes = next((n, a) for n, a in items if schema.IMAGES in a and a[schema.TURN_INDEX] == 1)
    images = attributes[schema.IMAGES]
    tampered = {**attributes, schema.IMAGES: images[:-1] + bytes([images[-1] ^ 1])}
    assert ingestor.ingest(make_request([make_span(name, tampered)])).rejected == 1
    result = ingestor.ingest(make_request([make_span(n, a) for n, a in items]))
    assert result.rejected == 0, result.errors
    batch = ingestor.store.start_batch("jsonl", "p0", 10)
    assert batch is not None
    [record] = batch.records
    assert record["complete"], record["reason"]
    assert record["image_data"] == [USER_URL, TOOL_URL]
    assert record["token_ids"] == original.token_ids
