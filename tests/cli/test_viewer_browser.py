"""The trajectory viewer in a real headless Chromium (the Debian package, driven by Selenium), asserting on what a user
sees: the index with its flags, filters, sorting and search, each run's plots and agents side by side, a trajectory's
tokens with the hover card (id, text, logprob, mask, turn), turn and tool-call markers and reasoning set apart, the
logprob plot, the layout from 1,200 px up; both as a written page and as served by ``strands-tito view``, which takes
in records that arrive while it runs. ``make test`` installs Chromium (scripts/browser.sh); without it these tests
skip and say why.

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
from strands_tito.span_lineage import Lineage
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


def _trajectory(
    tokenizer: PreTrainedTokenizerBase, tid: str, turns: list[tuple[str, str]], finish: str = "stop"
) -> Trajectory:
    trajectory = Trajectory(trajectory_id=tid)
    for index, (prompt, output) in enumerate(turns):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        output_ids = tokenizer.encode(output, add_special_tokens=False)
        trajectory.append_turn(
            prompt_ids,
            output_ids,
            finish_reason="stop" if index < len(turns) - 1 else finish,  # type: ignore[arg-type]
            prompt_logprobs=None if index == 0 else [-0.5] * len(prompt_ids),
            output_logprobs=[-0.05 * (k % 7) for k in range(len(output_ids))],
            cached_tokens=0 if index == 0 else 20,
        )
    return trajectory


@pytest.fixture(scope="module")
def records(qwen3: PreTrainedTokenizerBase) -> list[dict[str, Any]]:
    calc = _trajectory(qwen3, "calc-1", [(QUESTION, CALLING), (RESULT, ANSWER)])
    lost = _trajectory(qwen3, "lost-2", [(QUESTION, CALLING)], finish="length")
    stock = _trajectory(qwen3, "openai-3", [(QUESTION, "It is 425.<|im_end|>")])
    solver = {"agent_name": "solver", "agent_id": "solver-0"}
    error = {"name": "multiply", "error": "arguments are not JSON", "raw": "{a: 25}"}
    return [
        TrajectoryRecord(
            "calc-1", calc, complete=True, model_id="qwen3-4b", rewards=[0.5, 1.0], lineage=Lineage("ep-1", **solver)
        ).to_dict(),
        TrajectoryRecord(
            "lost-2",
            lost,
            complete=False,
            reason="turn 1 is missing",
            model_id="qwen3-4b",
            tool_parse_errors=[error],
            lineage=Lineage("ep-2", **solver),
        ).to_dict(),
        TrajectoryRecord(
            "openai-3",
            stock,
            complete=True,
            model_id="gpt-stock",
            rewards=[0.0],
            prefix_report=[PrefixCheck(1, False, 40, 37)],
            prefix_consistent=False,
            lineage=Lineage("ep-1", agent_name="checker"),
        ).to_dict(),
    ]


@pytest.fixture(scope="module")
def other_run(qwen3: PreTrainedTokenizerBase) -> list[dict[str, Any]]:
    """A second run: long ids and agent names (what overflowed the index at 1,400 px), different rewards."""
    out = []
    for k in range(4):
        tid = f"{k:08x}-5f0c-4d8e-9a41-3c2b7e1d{k:04x}-rollout-attempt-{k}"
        calc = _trajectory(qwen3, tid, [(QUESTION, CALLING), (RESULT, ANSWER * (k + 1))])
        lineage = Lineage(
            f"episode-{k // 2}-of-a-long-benchmark-task-name", agent_name="solver" if k % 2 else "planner"
        )
        out.append(
            TrajectoryRecord(tid, calc, True, model_id="Qwen/Qwen3-8B", rewards=[k / 4], lineage=lineage).to_dict()
        )
    return out


@pytest.fixture(scope="module")
def two_runs_page(
    records: list[dict[str, Any]], other_run: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The page `strands-tito inspect A --compare B --html OUT` writes."""
    folder = tmp_path_factory.mktemp("runs")
    first, second = folder / "baseline.jsonl", folder / "tuned.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in records))
    second.write_text("".join(json.dumps(r) + "\n" for r in other_run))
    out = folder / "compare.html"
    subprocess.run(
        [sys.executable, "-m", "strands_tito.cli", "inspect", str(first), "--compare", str(second), "--tokenizer",
         "qwen3", "--html", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )  # fmt: skip
    return out


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


def _set_width(browser: Any, width: int) -> None:
    browser.set_window_size(width, 1000)
    browser.execute_script("return document.body.offsetWidth")  # layout after the resize


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

    bars = browser.find_elements(By.CSS_SELECTOR, "#length-plot-0 rect.bar")
    assert len(bars) == 12 and sum(int(b.get_attribute("height") != "0") for b in bars) >= 2
    assert "n=1" in browser.find_element(By.ID, "reward-plot-0").text  # of the two shown, one has a reward


def _choose(browser: Any, select: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, select)).select_by_value(value)


def _type(browser: Any, field: str, text: str) -> None:
    from selenium.webdriver.common.by import By

    element = browser.find_element(By.ID, field)
    element.clear()
    element.send_keys(text)


def _fmt(value: float) -> str:
    """A number as the page writes it."""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def test_the_index_filters_by_reward_finish_tool_errors_agent_episode_state_and_text(
    browser: Any, written_page: Path, records: list[dict[str, Any]]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(written_page.as_uri())

    def shows(expected: list[str]) -> None:
        WebDriverWait(browser, 10).until(lambda b: sorted(_rows(b)) == expected)
        count = browser.find_element(By.ID, "count").text
        assert count == f"{len(expected)} of 3 trajectories"

    def clear() -> None:
        browser.find_element(By.ID, "clear").click()
        shows(["0", "1", "2"])

    _type(browser, "reward-min", "0.5")
    shows(["0"])  # rewards 1.0 and 0.0; the one without a reward is out once a bound is set
    _type(browser, "reward-min", "")
    _type(browser, "reward-max", "0.5")
    shows(["2"])
    clear()
    assert sorted(e.get_attribute("value") for e in browser.find_elements(By.CSS_SELECTOR, "#finish option")) == [
        "",
        "length",
        "stop",
    ]
    _choose(browser, "finish", "length")
    shows(["1"])
    clear()
    _choose(browser, "tool-errors", "yes")
    shows(["1"])
    _choose(browser, "tool-errors", "no")
    shows(["0", "2"])
    clear()
    _choose(browser, "agent", "solver")
    shows(["0", "1"])
    # The per-agent table follows the filters: solver's two trajectories, one with a reward (1.0), one complete, one
    # tool error.
    agents = browser.find_element(By.CSS_SELECTOR, "#agents-0 table").text.splitlines()
    tokens = (len(records[0]["token_ids"]) + len(records[1]["token_ids"])) / 2
    assert agents[1:] == [f"solver 2 1 {_fmt(tokens)} 1 1"]
    _type(browser, "episode", "ep-1")
    shows(["0"])
    clear()
    _choose(browser, "state", "incomplete")
    shows(["1"])
    _choose(browser, "state", "diverged")
    shows(["2"])
    clear()
    # Text of the tokens, decoded: the tool call is in calc-1 and lost-2, the plain answer only in openai-3.
    _type(browser, "text", "MULTIPLY them" + Keys.ENTER)
    shows(["0", "1"])
    assert browser.find_element(By.ID, "text-status").text == '2 contain "MULTIPLY them"'
    _type(browser, "text", "It is 425" + Keys.ENTER)
    shows(["2"])
    _type(browser, "search", "lost")  # filters combine: no row passes both
    shows([])
    clear()


def test_a_trajectory_shows_every_token(
    browser: Any, written_page: Path, records: list[dict[str, Any]], qwen3: PreTrainedTokenizerBase
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(written_page.as_uri())
    browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='0']").click()
    record = records[0]
    tokens = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")
    assert len(tokens) == len(record["token_ids"])
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
    _screenshot(browser, "viewer-trajectory.png")


def test_hovering_a_token_shows_its_card(
    browser: Any, written_page: Path, records: list[dict[str, Any]], qwen3: PreTrainedTokenizerBase
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.get(written_page.as_uri())
    browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='0']").click()
    record = records[0]
    first, second = record["turns"]
    tokens = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")
    assert all(t.get_dom_attribute("title") is None for t in tokens[:50])  # no plain browser tooltip any more
    card = browser.find_element(By.ID, "card")
    assert not card.is_displayed()
    cases = {
        0: "0, new prompt",
        first["prompt_length"]: "0, model output",
        second["prompt_start"] + 2: "1, new prompt",
        len(tokens) - 1: "1, model output",
    }
    for position, turn in cases.items():
        ActionChains(browser).move_to_element(tokens[position]).perform()
        assert card.is_displayed()
        cell = {k: card.find_element(By.CSS_SELECTOR, f".card-{k}").text for k in ("position", "id", "logprob", "turn")}
        assert cell["position"] == str(position)
        assert cell["id"] == str(record["token_ids"][position])
        assert cell["turn"] == turn
        logprob = record["logprobs"][position]
        assert cell["logprob"] == "none" if logprob is None else float(cell["logprob"].split()[0]) == round(logprob, 4)
        mask = card.find_element(By.CSS_SELECTOR, ".card-loss-mask").text
        assert mask.startswith(str(record["loss_mask"][position]))
        text = card.find_element(By.CSS_SELECTOR, ".text").text
        assert json.loads(text) == qwen3.decode([record["token_ids"][position]])  # whitespace shown escaped
        box, under = card.rect, tokens[position].rect
        assert box["y"] >= under["y"] + under["height"] or box["y"] + box["height"] <= under["y"]  # beside, not over
    if os.environ.get("STRANDS_TITO_SCREENSHOTS"):
        ActionChains(browser).move_to_element(tokens[first["prompt_length"] + 3]).perform()
        _screenshot(browser, "viewer-hover.png")
    ActionChains(browser).move_to_element(browser.find_element(By.ID, "title")).perform()
    assert not card.is_displayed()


def test_the_logprob_plot_breaks_between_turns(browser: Any, written_page: Path, records: list[dict[str, Any]]) -> None:
    from selenium.webdriver.common.by import By

    browser.get(written_page.as_uri())
    browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='0']").click()
    record = records[0]
    lines = browser.find_elements(By.CSS_SELECTOR, "#logprob-plot polyline")
    assert len(lines) == len(record["turns"]) == 2  # one line per turn's output, none across the prompt between
    total = len(record["token_ids"])
    for line, turn in zip(lines, record["turns"], strict=True):
        xs = [float(point.split(",")[0]) for point in line.get_attribute("points").split()]
        start = turn["prompt_start"] + turn["prompt_length"]
        assert len(xs) == turn["output_length"]
        # x = 10 + 620 * position / length: every point lies within its own turn's output
        assert min(xs) == pytest.approx(10 + 620 * start / total, abs=0.06)
        assert max(xs) == pytest.approx(10 + 620 * (start + turn["output_length"] - 1) / total, abs=0.06)


def test_the_page_says_why_ids_are_bare_without_a_tokenizer(
    browser: Any, written_page: Path, records: list[dict[str, Any]], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(written_page.as_uri())
    assert not browser.find_element(By.ID, "notice").is_displayed()  # decoded: nothing to explain
    data, out = tmp_path / "t.jsonl", tmp_path / "bare.html"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    subprocess.run(
        [sys.executable, "-m", "strands_tito.cli", "inspect", str(data), "--html", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    browser.get(out.as_uri())
    notice = browser.find_element(By.ID, "notice")
    assert notice.is_displayed()
    assert "shown as bare ids" in notice.text and "no tokenizer was given" in notice.text
    assert "--tokenizer qwen3, tiny or a local tokenizer directory" in notice.text
    browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='0']").click()
    first = browser.find_element(By.CSS_SELECTOR, "#tokens .tok").text
    assert first == f"[{records[0]['token_ids'][0]}]"


def test_two_runs_side_by_side(
    browser: Any, two_runs_page: Path, records: list[dict[str, Any]], other_run: list[dict[str, Any]]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _set_width(browser, 1600)
    browser.get(two_runs_page.as_uri())
    assert browser.find_element(By.ID, "count").text == "7 of 7 trajectories"
    panels = browser.find_elements(By.CSS_SELECTOR, "#runs .run")
    assert [p.find_element(By.TAG_NAME, "h2").text for p in panels] == [
        "A baseline.jsonl (3 of 3 trajectories)",
        "B tuned.jsonl (4 of 4 trajectories)",
    ]
    left, right = panels[0].rect, panels[1].rect
    assert left["x"] + left["width"] <= right["x"] and abs(left["y"] - right["y"]) < 1  # side by side
    # Distributions over bins both runs share, and each run's agents.
    assert "n=2" in browser.find_element(By.ID, "reward-plot-0").text
    assert "n=4" in browser.find_element(By.ID, "reward-plot-1").text
    ranges = [browser.find_element(By.ID, f"length-plot-{i}").text.split("n=")[0] for i in (0, 1)]
    assert ranges[0] == ranges[1]
    agents = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#agents-1 tr")[1:]]
    lengths = [len(r["token_ids"]) for r in other_run]
    assert agents == [
        f"planner 2 {_fmt((0 + 0.5) / 2)} {_fmt((lengths[0] + lengths[2]) / 2)} 2 0",
        f"solver 2 {_fmt((0.25 + 0.75) / 2)} {_fmt((lengths[1] + lengths[3]) / 2)} 2 0",
    ]
    # The run filter, and the other filters, apply to both panels.
    _choose(browser, "run", "B: tuned.jsonl")
    WebDriverWait(browser, 10).until(lambda b: sorted(_rows(b)) == ["3", "4", "5", "6"])
    assert [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#index .badge")] == ["B"] * 4
    browser.find_element(By.ID, "clear").click()
    _choose(browser, "agent", "solver")
    WebDriverWait(browser, 10).until(lambda b: sorted(_rows(b)) == ["0", "1", "4", "6"])
    heads = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#runs .run h2")]
    assert heads == ["A baseline.jsonl (2 of 3 trajectories)", "B tuned.jsonl (2 of 4 trajectories)"]
    browser.find_element(By.ID, "clear").click()
    _set_width(browser, 1200)
    browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='4']").click()
    _screenshot(browser, "viewer-compare-1200.png")


@pytest.mark.parametrize("width", [1200, 1400, 1920])
def test_the_layout_holds_from_1200_px(browser: Any, two_runs_page: Path, width: int) -> None:
    from selenium.webdriver.common.by import By

    _set_width(browser, width)
    browser.get(two_runs_page.as_uri())
    browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='4']").click()
    assert browser.execute_script("return document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    left = browser.find_element(By.ID, "left").rect
    right = browser.find_element(By.ID, "right").rect
    assert left["x"] + left["width"] <= right["x"]
    # What is drawn along the trajectory pane's left edge belongs to it: nothing of the index shows over it.
    foreign = browser.execute_script(
        """const r = document.getElementById('right').getBoundingClientRect(), out = [];
        for (let y = r.top + 5; y < Math.min(r.bottom, innerHeight); y += 10) for (const dx of [1, 40, 120]) {
          const e = document.elementFromPoint(r.left + dx, y);
          if (e && e.closest('#left')) out.push(e.outerHTML.slice(0, 80)); }
        return out;"""
    )
    assert foreign == []
    plot = browser.find_element(By.ID, "logprob-plot").rect
    assert plot["x"] + plot["width"] <= right["x"] + right["width"] + 1


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
    _set_width(browser, 1600)
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


def test_the_served_viewer_shows_records_that_arrive_while_it_runs(
    browser: Any, records: list[dict[str, Any]], tmp_path: Path, qwen3: PreTrainedTokenizerBase
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records[:2]))
    server = serve(data, Decoder(qwen3), port=0, tokenizer="qwen3")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    count = (By.ID, "count")
    _set_width(browser, 1600)
    try:
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        assert browser.find_element(*count).text == "2 of 2 trajectories"
        assert browser.find_element(By.ID, "live").text.startswith("live: reading t.jsonl every 2 s")
        assert not browser.find_element(By.ID, "notice").is_displayed()  # decoded with qwen3
        _choose(browser, "agent", "solver")  # a filter is kept while rows arrive
        line = json.dumps(records[2]) + "\n"
        with data.open("a") as handle:  # the collector appends; a line still being written is not shown
            handle.write(line[:200])
            handle.flush()
            fetch = "fetch('rows?from=2').then(r => r.json()).then(arguments[0])"  # what the page's poll asks
            assert browser.execute_async_script(fetch) == []
            handle.write(line[200:])
        WebDriverWait(browser, 30).until(lambda b: b.find_element(*count).text == "2 of 3 trajectories")
        assert "1 new at" in browser.find_element(By.ID, "live").text
        assert sorted(_rows(browser)) == ["0", "1"]
        browser.find_element(By.ID, "clear").click()
        browser.find_element(By.CSS_SELECTOR, "tr.row[data-n='2']").click()
        WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "title").text == "trajectory openai-3")
        assert "checker" in browser.find_element(By.CSS_SELECTOR, "#agents-0 table").text
        # The served page searches the tokens' text on the server (it holds only the index).
        _type(browser, "text", "It is 425" + Keys.ENTER)
        WebDriverWait(browser, 30).until(lambda b: _rows(b) == ["2"])
        assert browser.find_element(By.ID, "text-status").text == '1 contain "It is 425"'
    finally:
        server.shutdown()
        server.server_close()
