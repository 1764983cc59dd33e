"""The trajectory viewer in a real headless Chromium (the Debian package, driven by Selenium), asserting on what a user
sees: the index with its flags, sorting and search, the plots, and a trajectory's tokens with ids, logprobs, loss
mask, turn and tool-call markers and reasoning set apart; both as a written page and as served by ``strands-tito
view``. ``make test`` installs Chromium (scripts/browser.sh); without it these tests skip and say why.

``STRANDS_TITO_SCREENSHOTS=DIR`` saves the screenshots the docs use (docs/viewer.md).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from strands_tito.assembly import PrefixCheck, TrajectoryRecord
from strands_tito.html_view import serve
from strands_tito.trajectory import Trajectory
from strands_tito.viewer import Decoder

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="no chromium/chromedriver on PATH: run scripts/browser.sh (make test does), or apt-get install chromium "
    "chromium-driver",
)

QUESTION = "<|im_start|>user\nWhat is 25 * 17?<|im_end|>\n<|im_start|>assistant\n"
CALLING = (
    "<think>\nI should multiply them with the tool.\n</think>\n\n"
    '<tool_call>\n{"name": "multiply", "arguments": {"a": 25, "b": 17}}\n</tool_call><|im_end|>'
)
RESULT = "\n<|im_start|>user\n<tool_response>\n425\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
ANSWER = "25 * 17 = 425.<|im_end|>"


def _trajectory(tokenizer: PreTrainedTokenizerBase, tid: str, turns: list[tuple[str, str]]) -> Trajectory:
    trajectory = Trajectory(trajectory_id=tid)
    for index, (prompt, output) in enumerate(turns):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        output_ids = tokenizer.encode(output, add_special_tokens=False)
        trajectory.append_turn(
            prompt_ids,
            output_ids,
            finish_reason="stop",
            prompt_logprobs=None if index == 0 else [-0.5] * len(prompt_ids),
            output_logprobs=[-0.05 * (k % 7) for k in range(len(output_ids))],
            cached_tokens=0 if index == 0 else 20,
        )
    return trajectory


@pytest.fixture(scope="module")
def records(qwen3: PreTrainedTokenizerBase) -> list[dict[str, Any]]:
    calc = _trajectory(qwen3, "calc-1", [(QUESTION, CALLING), (RESULT, ANSWER)])
    lost = _trajectory(qwen3, "lost-2", [(QUESTION, CALLING)])
    stock = _trajectory(qwen3, "openai-3", [(QUESTION, "It is 425.<|im_end|>")])
    return [
        TrajectoryRecord("calc-1", calc, complete=True, model_id="qwen3-4b", rewards=[0.5, 1.0]).to_dict(),
        TrajectoryRecord("lost-2", lost, complete=False, reason="turn 1 is missing", model_id="qwen3-4b").to_dict(),
        TrajectoryRecord(
            "openai-3",
            stock,
            complete=True,
            model_id="gpt-stock",
            rewards=[0.0],
            prefix_report=[PrefixCheck(1, False, 40, 37)],
            prefix_consistent=False,
        ).to_dict(),
    ]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def written_page(records: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page `strands-tito inspect FILE --html OUT` writes."""
    folder = tmp_path_factory.mktemp("viewer")
    data = folder / "t.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = folder / "view.html"
    subprocess.run(
        [sys.executable, "-m", "strands_tito.cli", "inspect", str(data), "--tokenizer", "qwen3", "--html", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def _screenshot(browser: Any, name: str) -> None:
    folder = os.environ.get("STRANDS_TITO_SCREENSHOTS")
    if folder:
        browser.save_screenshot(str(Path(folder) / name))


def _rows(browser: Any) -> list[str]:
    """The index rows shown, in order (read in one script: the index may be redrawn meanwhile)."""
    rows: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('#index tbody tr.row')].map(r => r.dataset.n)"
    )
    return rows


def test_the_index_flags_sorts_searches_and_plots(browser: Any, written_page: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(written_page.as_uri())
    assert browser.find_element(By.ID, "count").text == "3 of 3 trajectories"
    flags = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#index .flag")]
    assert "incomplete: turn 1 is missing" in flags
    assert "prefix diverged at call 1, position 37" in flags
    _screenshot(browser, "viewer-index.png")

    reward = browser.find_element(By.CSS_SELECTOR, "th[data-key=reward]")
    reward.click()
    assert _rows(browser) == ["0", "2", "1"]  # descending: 1.0, 0.0, then the one without a reward
    reward.click()
    assert _rows(browser) == ["2", "0", "1"]  # ascending, no reward still last
    browser.find_element(By.CSS_SELECTOR, "th[data-key=tokens]").click()
    tokens = [int(e.text) for e in browser.find_elements(By.CSS_SELECTOR, "#index tbody tr.row td:nth-child(5)")]
    assert tokens == sorted(tokens, reverse=True)

    from selenium.webdriver.support.ui import WebDriverWait

    search = browser.find_element(By.ID, "search")
    search.send_keys("diverged")  # the index is redrawn once typing pauses
    WebDriverWait(browser, 10).until(lambda b: _rows(b) == ["2"])
    search.clear()
    search.send_keys("qwen3")
    WebDriverWait(browser, 10).until(lambda b: sorted(_rows(b)) == ["0", "1"])
    assert browser.find_element(By.ID, "count").text == "2 of 3 trajectories"

    bars = browser.find_elements(By.CSS_SELECTOR, "#length-plot rect.bar")
    assert len(bars) == 12 and sum(int(b.get_attribute("height") != "0") for b in bars) >= 2
    assert "n=2" in browser.find_element(By.ID, "reward-plot").text  # two trajectories have a reward


def test_a_trajectory_shows_every_token(
    browser: Any, written_page: Path, records: list[dict[str, Any]], qwen3: PreTrainedTokenizerBase
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(written_page.as_uri())
    browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='0']").click()
    record = records[0]
    tokens = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")
    assert len(tokens) == len(record["token_ids"])
    # Token boundaries with ids, position, logprob and mask on hover, and the text as the tokenizer decodes it.
    for position in (0, record["turns"][0]["prompt_length"], len(tokens) - 1):
        title = tokens[position].get_attribute("title")
        logprob = record["logprobs"][position]
        assert title.startswith(f"position {position} · id {record['token_ids'][position]} · logprob ")
        assert title.endswith(f"loss mask {record['loss_mask'][position]}")
        shown = title.split(" · logprob ")[1].split(" · ")[0]
        assert shown == "none" if logprob is None else float(shown) == round(logprob, 4)
    assert "".join(t.get_attribute("textContent") for t in tokens) == qwen3.decode(record["token_ids"])
    # Loss mask: generated tokens are m1 and shaded by their logprob; the rest m0.
    generated = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok.m1")
    assert len(generated) == sum(record["loss_mask"])
    heat = [[c for c in t.get_attribute("class").split() if c[:1] == "h" and c[1:].isdigit()] for t in generated]
    pairs = zip(record["logprobs"], record["loss_mask"], strict=True)
    expected = [[f"h{min(9, int(math.exp(round(lp, 4)) * 10))}"] for lp, m in pairs if m]
    assert heat == expected  # shaded by logprob: ten levels of exp(logprob)
    # Turn markers with finish reasons; the tool call, special tokens and reasoning marked.
    markers = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#tokens .turn")]
    assert markers[0].startswith("TURN 0: NEW PROMPT") or markers[0].lower().startswith("turn 0: new prompt")
    assert sum("finish stop" in m for m in markers) == 2 and len(markers) == 4
    call = "".join(t.get_attribute("textContent") for t in browser.find_elements(By.CSS_SELECTOR, "#tokens .call"))
    assert call.startswith("<tool_call>") and call.endswith("</tool_call>") and '"multiply"' in call
    reasoning = "".join(
        t.get_attribute("textContent") for t in browser.find_elements(By.CSS_SELECTOR, "#tokens .reasoning")
    )
    assert "I should multiply them with the tool." in reasoning and "425" not in reasoning
    specials = {t.get_attribute("textContent") for t in browser.find_elements(By.CSS_SELECTOR, "#tokens .special")}
    assert {"<|im_start|>", "<|im_end|>"} <= specials
    # Facts, turn table and the logprob plot.
    facts = browser.find_element(By.ID, "facts").text
    assert "reward\n1" in facts and "rewards\n0.5, 1" in facts and "qwen3-4b" in facts
    assert [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#turns td:nth-child(4)")] == ["stop", "stop"]
    points = browser.find_element(By.CSS_SELECTOR, "#logprob-plot polyline").get_attribute("points").split()
    assert len(points) == sum(record["loss_mask"])
    _screenshot(browser, "viewer-trajectory.png")


def test_a_diverged_trajectory_shows_where(browser: Any, written_page: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(written_page.as_uri())
    browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='2']").click()
    assert "does not extend the previous call from position 37" in browser.find_element(By.ID, "flags").text
    # The merged tokens end where the next call stopped extending them: the marker says so after the last one.
    marker = browser.find_element(By.CSS_SELECTOR, "#tokens .diverge")
    assert "call 1's prompt does not extend these tokens (it differs from position 37)" in marker.text
    last = marker.find_element(By.XPATH, "preceding-sibling::span[contains(@class, 'tok')][1]")
    assert last.get_attribute("data-i") == str(len(browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")) - 1)


def test_the_served_viewer_loads_trajectories_on_demand_and_renders_long_ones_as_you_scroll(
    browser: Any, records: list[dict[str, Any]], tmp_path: Path, qwen3: PreTrainedTokenizerBase
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    long = _trajectory(qwen3, "long-4", [(QUESTION, ANSWER * 400)])
    long_record = TrajectoryRecord("long-4", long, complete=True).to_dict()
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [*records, long_record]))
    server = serve(data, Decoder(qwen3), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    title = (By.ID, "title")
    try:
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        assert "<script type='application/json' id='t0'>" not in browser.page_source  # nothing embedded
        browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='1']").click()
        WebDriverWait(browser, 30).until(lambda b: b.find_element(*title).text == "trajectory lost-2")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")) == len(records[1]["token_ids"])
        assert "incomplete: turn 1 is missing" in browser.find_element(By.ID, "flags").text

        browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='3']").click()
        WebDriverWait(browser, 30).until(lambda b: b.find_element(*title).text == "trajectory long-4")
        total = len(long_record["token_ids"])
        assert total > 4000
        assert len(browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")) == 2000  # the first chunk only
        assert f"{total - 2000} more tokens" in browser.find_element(By.CSS_SELECTOR, "#tokens .more").text
        for _ in range(10):  # scrolling to the end renders the rest, chunk by chunk
            browser.execute_script("const b = document.getElementById('tokens'); b.scrollTop = b.scrollHeight;")
            if len(browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")) == total:
                break
            WebDriverWait(browser, 10).until(lambda b: b.execute_script("return true"))
        WebDriverWait(browser, 30).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#tokens .tok")) == total)
    finally:
        server.shutdown()
        server.server_close()
