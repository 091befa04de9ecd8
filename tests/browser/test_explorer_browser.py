"""The attention explorer in a real browser: Debian's Chromium driven by
Playwright against `keras-transformer serve --explorer` on the tiny exports.

For each model the page must show what the REST API answers (the label and
every class's probability, or the translations and scores of `translate` with
the decoding the page's controls choose) and draw, for every layer and
head, heatmap cells that carry the weights the `attention` signature returns
(`data-weight` per cell), darker for larger weights, with the tokens on both
axes; at 390 px (a phone) and 1280 px wide. Bad input (an empty text, a 200 KB
paste, a model that went away, a server error, a server out of reach) gives a
clear message and the page stays usable. No test passes with an uncaught page
error. Screenshots of each state are written under the test's tmp_path.
"""

import json
import os
import re
import shutil
import time

import httpx
import numpy as np
import pytest

from tests.serving.serving_helpers import CLASS_NAMES

CHROMIUM = "/usr/bin/chromium"
WIDTHS = [390, 1280]
WAIT_MS = 30_000
# The attention outputs of the exports the page draws:
# output -> (map title, row tokens, column tokens).
MAPS = {
    "attention_scores": ("Encoder self-attention", "tokens", "tokens"),
    "cross_attention": ("Cross-attention (target × source)", "target_tokens", "source_tokens"),
    "encoder_self_attention": ("Encoder self-attention", "source_tokens", "source_tokens"),
    "decoder_self_attention": ("Decoder self-attention", "target_tokens", "decoder_input_tokens"),
}

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(explorer_server):
    """The server, with a third model (a copy of the classifier) that a test takes away."""
    return explorer_server


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright is not installed: `make venv` installs it (requirements.txt).")
    if not os.path.isfile(CHROMIUM):
        pytest.fail(
            f"No Chromium at {CHROMIUM}: `make venv` installs it (apt-get install -y chromium)."
        )
    with sync_playwright() as playwright:
        # A browser that cannot start fails here within the timeout instead of hanging the run.
        launched = playwright.chromium.launch(executable_path=CHROMIUM, timeout=WAIT_MS)
        yield launched
        launched.close()


@pytest.fixture
def open_page(browser, server, tmp_path):
    """`open_page(width)` -> the explorer in a fresh browser context, its model list loaded.
    After the test: no uncaught page error and no Content-Security-Policy violation."""
    contexts, problems = [], []

    def open_page(width):
        context = browser.new_context(viewport={"width": width, "height": 900})
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on(
            "console",
            lambda message: (
                problems.append(message.text) if "Content Security Policy" in message.text else None
            ),
        )
        page.goto(server.url + "/")
        page.wait_for_selector("#model option:not([disabled])", state="attached")
        return page

    yield open_page
    for context in contexts:
        context.close()
    assert not problems, problems


def expect_text(page, selector, text):
    from playwright.sync_api import expect

    expect(page.locator(selector)).to_have_text(text, timeout=WAIT_MS)


def rest_predict(server, model, text, signature="serving_default"):
    response = httpx.post(
        f"{server.url}/v1/models/{model}:predict",
        json={"signature_name": signature, "instances": [text]},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()["predictions"][0]


def rest_translate(server, text, **controls):
    """The translator's `translate` answer over REST to `text` with `controls`:
    [(translation, score)], best first."""
    response = httpx.post(
        f"{server.url}/v1/models/translator:predict",
        json={"signature_name": "translate", "inputs": {"text": [text], **controls}},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    return list(zip(outputs["translations"][0], outputs["scores"][0]))


def shown_translations(page):
    """The ranked translations the page shows: [(translation, score)], as listed."""
    return [
        tuple(item)
        for item in page.eval_on_selector_all(
            "#translations li",
            "items => items.map(i => [i.querySelector('.ranked-text').textContent, "
            "+i.dataset.score])",
        )
    ]


def record_predicts(page):
    """The bodies the page posts to `:predict`, as they are sent (a list filled as it goes)."""
    bodies = []
    page.on(
        "request",
        lambda request: (
            bodies.append(json.loads(request.post_data)) if ":predict" in request.url else None
        ),
    )
    return bodies


def ask(page, model, text, by="enter"):
    """Chooses `model`, types `text` and sends it by Enter or the button; waits for the answer."""
    page.select_option("#model", model)
    page.fill("#text", text)
    if by == "enter":
        page.press("#text", "Enter")
    else:
        page.click("#submit")
    expect_text(page, "#status", f"{model} answered.")


def shot(page, tmp_path, name):
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)


def luminance(css_colour):
    red, green, blue = (int(value) for value in re.findall(r"\d+", css_colour)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def assert_heatmaps(page, attention, outputs):
    """For each attention output of the answer (`outputs`), every layer and head: the
    page's cells carry the weights of its real tokens, and a larger weight is never lighter."""
    titles = page.locator("#map option").all_text_contents()
    drawn = [name for name in MAPS if name in outputs]
    assert titles == [MAPS[name][0] for name in drawn]
    for map_index, name in enumerate(drawn):
        _, row_output, column_output = MAPS[name]
        rows = [token for token in attention[row_output] if token]
        columns = [token for token in attention[column_output] if token]
        weights = np.asarray(attention[name])
        page.select_option("#map", index=map_index)
        # One colour scale per map, from 0 to its largest weight (any layer, head), the darkest
        # cell.
        largest = weights[:, :, : len(rows), : len(columns)].max()
        expect_text(page, "#legend-low", "0")
        expect_text(page, "#legend-high", f"{largest:.3f}")
        ramp = re.findall(
            r"rgb\([^)]*\)",
            page.eval_on_selector(".legend-ramp", "e => getComputedStyle(e).backgroundImage"),
        )
        darkest, darkest_of_largest = [], []
        for layer in range(weights.shape[0]):
            for head in range(weights.shape[1]):
                page.select_option("#layer", index=layer)
                page.select_option("#head", index=head)
                heatmap = page.locator("#heatmap")
                assert (
                    heatmap.get_attribute("data-map"),
                    heatmap.get_attribute("data-layer"),
                    heatmap.get_attribute("data-head"),
                ) == (name, str(layer), str(head))
                assert page.locator("#heatmap .row-label").all_text_contents() == rows
                assert page.locator("#heatmap .col-label").all_text_contents() == columns
                cells = page.eval_on_selector_all(
                    "#heatmap .cell",
                    "cells => cells.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.weight, "
                    "getComputedStyle(c).backgroundColor])",
                )
                assert len(cells) == len(rows) * len(columns)
                shown = np.full((len(rows), len(columns)), np.nan)
                for row, column, weight, _ in cells:
                    shown[row, column] = weight
                np.testing.assert_allclose(
                    shown, weights[layer, head, : len(rows), : len(columns)], atol=1e-6, rtol=0
                )
                ordered = sorted(cells, key=lambda cell: cell[2])
                lightness = [luminance(cell[3]) for cell in ordered]
                assert all(
                    later <= earlier + 1e-9 for earlier, later in zip(lightness, lightness[1:])
                )
                assert lightness[0] > lightness[-1] or ordered[0][2] == ordered[-1][2]
                darkest.append(lightness[-1])
                if ordered[-1][2] == pytest.approx(largest, abs=1e-6):
                    darkest_of_largest.append(lightness[-1])
                    assert ordered[-1][3] == ramp[-1]  # the legend's dark end
                assert all(colour == ramp[0] for _, _, weight, colour in cells if weight == 0)
        assert darkest_of_largest and max(darkest_of_largest) <= min(darkest) + 1e-9


def assert_fits(page, width):
    """Nothing but the heatmap's own scroll box is wider than the window."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("width", WIDTHS)
def test_the_classifier_answer_and_its_attention(open_page, server, tmp_path, width):
    page = open_page(width)
    text = "the cat sat on the mat"
    ask(page, "classifier", text)
    answer = rest_predict(server, "classifier", text)
    attention = rest_predict(server, "classifier", text, "attention")
    expect_text(page, "#answer-text", answer["label"])
    bars = page.eval_on_selector_all(
        "#probabilities .bar-row",
        "rows => rows.map(r => [r.dataset.className, +r.dataset.probability])",
    )
    assert [name for name, _ in bars] == CLASS_NAMES
    np.testing.assert_allclose(
        [probability for _, probability in bars], answer["probabilities"], atol=1e-6, rtol=0
    )
    assert page.locator("#probabilities .bar-label").all_text_contents() == CLASS_NAMES
    assert_heatmaps(page, attention, attention)
    assert_fits(page, width)
    shot(page, tmp_path, f"classifier-{width}")

    # Pointing at a cell, or moving with the arrow keys, names the token pair and the weight.
    tokens = [token for token in attention["tokens"] if token]
    weights = np.asarray(attention["attention_scores"])
    page.select_option("#layer", index=0)
    page.select_option("#head", index=0)
    page.hover('#heatmap .cell[data-row="1"][data-col="0"]')
    expect_text(
        page,
        "#cell-info",
        f"query token “{tokens[1]}” → key token “{tokens[0]}”: {weights[0, 0, 1, 0]:.4f}",
    )
    # A keyboard user's pointer is not over the map: left there, any redraw under it names
    # the cell it points at instead of the one the keys chose.
    page.mouse.move(0, 0)
    page.focus("#heatmap")
    page.keyboard.press("ArrowDown")  # the first press picks the top-left cell
    page.keyboard.press("ArrowRight")
    expect_text(
        page,
        "#cell-info",
        f"query token “{tokens[0]}” → key token “{tokens[1]}”: {weights[0, 0, 0, 1]:.4f}",
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_the_translation_and_its_attention(open_page, server, tmp_path, width):
    page = open_page(width)
    text = "y dijo dios sea la luz"
    ask(page, "translator", text, by="button")
    translation = rest_predict(server, "translator", text)
    attention = rest_predict(server, "translator", text, "attention")
    # The export's defaults, preselected, answer as serving_default: its beam search's best.
    shown = shown_translations(page)
    assert shown == rest_translate(server, text)
    assert [words for words, _ in shown] == [translation]
    assert page.locator("#answer-text").is_hidden()
    assert page.locator("#probabilities .bar-row").count() == 0
    assert_heatmaps(page, attention, attention)
    # The rows are the greedy translation's tokens, which the page spells out
    # (the answer above is the beam search's), "##" pieces joined to the word before.
    pieces = [token for token in attention["target_tokens"] if token not in ("", "[END]")]
    greedy = re.sub(r" ##", "", " ".join(pieces))
    expect_text(page, "#decoding-note", re.compile(re.escape(f"greedy translation “{greedy}”")))
    assert_fits(page, width)
    shot(page, tmp_path, f"translator-{width}")


def test_keyboard_only_with_an_empty_and_a_200_kb_text(open_page, server, tmp_path):
    page = open_page(390)
    predicts = []
    page.on(
        "request",
        lambda request: predicts.append(request.url) if ":predict" in request.url else None,
    )
    # The focus order follows the form: model, text, button.
    focused = []
    for _ in range(3):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.id"))
    assert focused == ["model", "text", "submit"]

    page.focus("#text")
    page.keyboard.press("Enter")
    expect_text(page, "#error", "Type a text first: the model has nothing to read.")
    assert predicts == [] and page.evaluate("document.activeElement.id") == "text"
    shot(page, tmp_path, "empty-text")

    huge = ("the market fell after the report " * 7000)[:200_000]
    page.fill("#text", huge)
    page.press("#text", "Enter")
    expect_text(page, "#status", "classifier answered.")
    assert page.locator("#error").is_hidden()
    expect_text(page, "#answer-text", rest_predict(server, "classifier", huge)["label"])
    attention = rest_predict(server, "classifier", huge, "attention")
    assert_heatmaps(page, attention, attention)
    assert_fits(page, 390)
    shot(page, tmp_path, "200-kb-text")

    # Still usable: a short text after the long one.
    page.fill("#text", "stocks rose sharply today")
    page.press("#text", "Enter")
    expect_text(
        page,
        "#answer-text",
        rest_predict(server, "classifier", "stocks rose sharply today")["label"],
    )


def test_a_server_error_and_an_unreachable_server_are_explained(open_page, server, tmp_path):
    page = open_page(1280)
    failure = {"error": "Internal error running the model: RuntimeError."}
    page.route(
        re.compile(r".*:predict$"),
        lambda route: route.fulfill(
            status=500, content_type="application/json", body=json.dumps(failure)
        ),
    )
    # A model chosen by name: the list's first one may be one that another test of the
    # shared server took away.
    page.select_option("#model", "classifier")
    page.fill("#text", "the team won the final")
    page.press("#text", "Enter")
    expect_text(
        page, "#error", "The server failed (500): Internal error running the model: RuntimeError."
    )
    assert page.locator("#answer").is_hidden() and page.locator("#submit").is_enabled()
    shot(page, tmp_path, "server-error")

    page.unroute(re.compile(r".*:predict$"))
    page.route(re.compile(r".*:predict$"), lambda route: route.abort())
    page.press("#text", "Enter")
    expect_text(page, "#error", "Cannot reach the server: is it still running?")
    shot(page, tmp_path, "unreachable")

    page.unroute(re.compile(r".*:predict$"))
    ask(page, "translator", "the team won the final")
    assert page.locator("#error").is_hidden()
    assert shown_translations(page) == rest_translate(server, "the team won the final")


def test_a_model_that_went_away(open_page, server, tmp_path):
    page = open_page(1280)
    page.select_option("#model", "doomed")
    shutil.rmtree(server.doomed / "1")
    deadline = time.monotonic() + 30
    while (
        httpx.get(f"{server.url}/explorer/models", timeout=10).json()["models"][1]["version"]
        is not None
    ):
        assert time.monotonic() < deadline, "the server still serves the removed version"
        time.sleep(0.1)
    page.fill("#text", "the cat sat on the mat")
    page.press("#text", "Enter")
    expect_text(
        page,
        "#error",
        re.compile(r'^Model "doomed" is not being served any more \(Servable not found'),
    )
    # The list now says so, and another model still answers.
    from playwright.sync_api import expect

    doomed = page.locator('#model option[value="doomed"]')
    expect(doomed).to_have_text("doomed (no version loaded)", timeout=WAIT_MS)
    expect(doomed).to_be_disabled(timeout=WAIT_MS)
    shot(page, tmp_path, "model-went-away")
    ask(page, "classifier", "the cat sat on the mat")
    expect_text(
        page, "#answer-text", rest_predict(server, "classifier", "the cat sat on the mat")["label"]
    )
    assert "Traceback" not in server.log()


def stub_model(page, name, **summary):
    """Routes `/explorer/models` to the server's own answer with model `name`'s summary
    updated by `summary`, and reloads the page. The shared server serves no classifier with
    a bag of n-grams (one would cost the session a bag's graph to trace and export), nor a
    translator exported before `translate`, so what the server would send for one is stubbed
    here; tests/serving/test_explorer.py and tests/export/ cover what the server and the
    export say of such a model."""

    def answer(route):
        models = route.fetch().json()
        for model in models["models"]:
            if model["name"] == name:
                model.update(summary)
        route.fulfill(json=models)

    page.route(re.compile(r".*/explorer/models$"), answer)
    page.reload()
    page.wait_for_selector("#model option:not([disabled])", state="attached")


def test_the_attention_notice_is_shown_for_a_model_that_has_one(open_page, server, tmp_path):
    from playwright.sync_api import expect

    from keras_transformer.export.parts import attention_notice

    text = "the cat sat on the mat"
    page = open_page(1280)
    signatures = []
    page.on(
        "request",
        lambda request: (
            signatures.append(json.loads(request.post_data)["signature_name"])
            if ":predict" in request.url
            else None
        ),
    )
    # A Transformer alone (the server's classifier): no notice, the maps.
    ask(page, "classifier", text)
    notice = page.locator("#attention-notice")
    expect(notice).to_be_hidden()
    assert notice.text_content() == ""
    expect(page.locator("#heatmap .cell").first).to_be_visible()

    # The answer is the bag of n-grams' alone: the export has no encoder, no attention
    # signature; the notice says so where the maps would be, and no map is drawn.
    alone = {
        "transformer_weight": 0.0,
        "transformer_tokens": 16,
        "bag_weight": 1.0,
        "bag_tokens": 16,
        "encoder": False,
    }
    stub_model(
        page, "classifier", attention=False, parts=alone, attention_notice=attention_notice(alone)
    )
    signatures.clear()
    ask(page, "classifier", text)
    expect_text(page, "#answer-text", rest_predict(server, "classifier", text)["label"])
    expect(notice).to_be_visible()
    expect(notice).to_have_text(attention_notice(alone))
    assert "no attention to show" in attention_notice(alone)
    assert notice.get_attribute("role") == "status"
    expect(page.locator("#attention-view")).to_be_hidden()
    expect(page.locator("#attention-message")).to_be_hidden()
    assert signatures == ["serving_default"]  # the attention signature is not asked for
    shot(page, tmp_path, "bag-alone-notice")

    # A mix whose bag reads past the maps: the notice above the maps, which are drawn.
    mixed = {**alone, "transformer_weight": 1.0, "bag_tokens": 40, "encoder": True}
    stub_model(
        page, "classifier", attention=True, parts=mixed, attention_notice=attention_notice(mixed)
    )
    ask(page, "classifier", text)
    expect(notice).to_have_text(attention_notice(mixed))
    expect(notice).to_be_visible()
    expect(page.locator("#heatmap .cell").first).to_be_visible()
    shot(page, tmp_path, "mix-notice")


def listed_controls(server):
    """The translator's `request_controls` as the server lists them for the page."""
    models = httpx.get(f"{server.url}/explorer/models", timeout=10).json()["models"]
    return next(model for model in models if model["name"] == "translator")["request_controls"]


def field(page, selector):
    """A control's value and limits as the page holds them: (value, min, max)."""
    return tuple(page.eval_on_selector(selector, "e => [e.value, e.min, e.max]"))


def test_beam_width_and_translations_are_chosen_on_the_page(open_page, server, tmp_path):
    from playwright.sync_api import expect

    page = open_page(390)
    sent = record_predicts(page)
    text = "y dijo dios sea la luz"
    page.select_option("#model", "translator")
    # The export's controls with its defaults chosen: a beam of 2 at most (serving_helpers.py),
    # one translation, no sampling.
    expect(page.locator("#decoding")).to_be_visible()
    assert field(page, "#beam-width") == ("2", "1", "2")
    assert field(page, "#num-translations") == ("1", "1", "2")
    assert not page.is_checked("#sampling")
    expect(page.locator("#sampling-controls")).to_be_hidden()
    expect_text(page, "#beam-width-hint", "Between 1 and 2; 1 is greedy decoding.")

    page.fill("#text", text)
    page.fill("#num-translations", "2")
    page.press("#num-translations", "Enter")  # Enter in a control sends, as in the text
    expect_text(page, "#status", "translator answered.")
    expected = rest_translate(server, text, beam_width=2, num_translations=2)
    assert len(expected) == 2 and shown_translations(page) == expected
    assert page.locator("#translations .ranked-score").all_text_contents() == [
        f"score {score:.3f}" for _, score in expected
    ]
    expect_text(page, "#answer-title", "Translations, best first")
    assert {body["signature_name"]: body for body in sent} == {
        "translate": {
            "signature_name": "translate",
            "inputs": {"text": [text], "beam_width": 2, "num_translations": 2, "sampling": False},
        },
        "attention": {"signature_name": "attention", "instances": [text]},
    }
    # The maps still follow the greedy decoding, and the page says so.
    expect(page.locator("#heatmap .cell").first).to_be_visible()
    expect_text(
        page,
        "#decoding-note",
        re.compile(
            r"^The maps follow the greedy translation “.*”; the translations above are "
            r"from beam search \(width 2\), so they can differ from it\.$"
        ),
    )
    assert_fits(page, 390)
    shot(page, tmp_path, "two-translations-390")

    # The translations' limit follows the beam width.
    page.fill("#beam-width", "1")
    assert field(page, "#num-translations")[2] == "1"
    expect_text(
        page, "#num-translations-hint", "Between 1 and 1 (the beam width); shown best first."
    )
    page.fill("#num-translations", "1")
    ask(page, "translator", text)
    assert shown_translations(page) == rest_translate(server, text, beam_width=1)
    expect_text(page, "#answer-title", "Translation")
    expect_text(
        page,
        "#decoding-note",
        re.compile(r"with a beam width of 1 the translation above is greedy too\.$"),
    )


def test_seeded_sampling_chosen_from_the_keyboard_is_repeatable(open_page, server, tmp_path):
    from playwright.sync_api import expect

    page = open_page(1280)
    sent = record_predicts(page)
    text = "la casa es azul"
    page.select_option("#model", "translator")
    page.fill("#text", text)
    page.focus("#text")
    focused = []
    for _ in range(3):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.id"))
    assert focused == ["beam-width", "num-translations", "sampling"]
    page.keyboard.press("Space")
    assert page.is_checked("#sampling")
    expect(page.locator("#sampling-controls")).to_be_visible()
    defaults = [
        page.input_value(selector) for selector in ("#temperature", "#top-k", "#top-p", "#seed")
    ]
    assert defaults == ["1", "0", "1", "0"]
    for _ in range(5):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.id"))
    assert focused[3:] == ["temperature", "top-k", "top-p", "seed", "submit"]

    controls = {"num_translations": 2, "temperature": 1.5, "top_p": 0.9, "seed": 7}
    for name, value in controls.items():
        page.fill(f"#{name.replace('_', '-')}", str(value))
    expected = rest_translate(server, text, beam_width=2, sampling=True, top_k=0, **controls)
    for _ in range(2):
        page.evaluate("document.getElementById('translations').replaceChildren()")
        page.press("#seed", "Enter")
        expect_text(page, "#status", "translator answered.")
        assert shown_translations(page) == expected
    assert [body["inputs"] for body in sent if body["signature_name"] == "translate"] == [
        {"text": [text], "beam_width": 2, "sampling": True, "top_k": 0, **controls}
    ] * 2
    expect_text(
        page,
        "#decoding-note",
        re.compile(r"the translations above are sampled, so they can differ from it\.$"),
    )
    shot(page, tmp_path, "sampling-1280")


def test_controls_out_of_range_cannot_be_sent(open_page, server, tmp_path):
    page = open_page(1280)
    sent = record_predicts(page)
    page.select_option("#model", "translator")
    page.fill("#text", "la casa es azul")
    page.check("#sampling")
    vocabulary = listed_controls(server)["inputs"]["top_k"]["maximum"]
    cases = [
        ("#beam-width", "3", "Beam width must be between 1 and 2, got 3."),
        ("#beam-width", "0", "Beam width must be between 1 and 2, got 0."),
        ("#beam-width", "1.5", "Beam width must be a whole number, got 1.5."),
        ("#beam-width", "", "Beam width needs a number."),
        ("#num-translations", "3", "Translations must be between 1 and 2 (the beam width), got 3."),
        ("#temperature", "0", "Temperature must be above 0, got 0."),
        (
            "#top-k",
            str(vocabulary + 1),
            f"Top-k must be between 0 and {vocabulary}, got {vocabulary + 1}.",
        ),
        ("#top-p", "1.5", "Top-p must be above 0 and at most 1, got 1.5."),
        (
            "#seed",
            "1e300",
            "Seed must be between -9007199254740991 and 9007199254740991, got 1e300.",
        ),
    ]
    for selector, bad, message in cases:
        good = page.input_value(selector)
        page.fill(selector, bad)
        page.press(selector, "Enter")
        expect_text(page, "#error", message)
        assert page.evaluate("document.activeElement.id") == selector[1:]
        assert page.get_attribute(selector, "aria-invalid") == "true"
        page.fill(selector, good)
    assert sent == []
    shot(page, tmp_path, "out-of-range")
    ask(page, "translator", "la casa es azul")
    assert page.locator("#error").is_hidden()
    assert page.locator("[aria-invalid]").count() == 0
    assert len(shown_translations(page)) == 1


def test_a_refused_control_is_explained_and_an_old_export_answers_as_before(
    open_page, server, tmp_path
):
    from playwright.sync_api import expect

    text = "el perro come pan"
    page = open_page(1280)
    # A model list that says the beam may be 5 wide (a version since replaced by one with a
    # narrower beam, say): the page sends 3, and shows what the server answers.
    wider = listed_controls(server)
    wider["inputs"]["beam_width"]["maximum"] = 5
    stub_model(page, "translator", request_controls=wider)
    page.select_option("#model", "translator")
    page.fill("#beam-width", "3")
    page.fill("#text", text)
    page.press("#text", "Enter")
    expect_text(
        page,
        "#error",
        "The server refused this request: Input 'beam_width' must be between 1 and 2, got 3.",
    )
    expect(page.locator("#answer")).to_be_hidden()
    assert page.locator("#submit").is_enabled()
    shot(page, tmp_path, "refused-control")

    # An export without `translate`: no controls, and the page asks serving_default as before.
    stub_model(page, "translator", request_controls=None)
    sent = record_predicts(page)
    ask(page, "translator", text)
    expect(page.locator("#decoding")).to_be_hidden()
    expect_text(page, "#answer-text", rest_predict(server, "translator", text))
    assert page.locator("#translations").is_hidden()
    assert sorted(body["signature_name"] for body in sent) == ["attention", "serving_default"]
    expect_text(
        page,
        "#decoding-note",
        re.compile(r"the translation above comes from beam search, so the two can differ\.$"),
    )
