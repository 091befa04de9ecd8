// The attention explorer: lists the served models, sends a text to a model's
// REST predict (serving_default for the answer, or a translator's translate
// with the decoding the page's controls choose; attention for the weights) and
// draws both. Hand-written, no library: it must work offline from the server.
"use strict";

(function () {
  // A heatmap is a grid of elements; beyond this many tokens a side it would be
  // too many elements to draw quickly and too small to read.
  const MAX_SHOWN_TOKENS = 64;
  const REQUEST_TIMEOUT_MS = 60000;

  // The attention outputs of each kind of export (keras_transformer/export/),
  // with the token outputs on their rows (queries) and columns (keys).
  const MAPS = {
    classifier: [
      { output: "attention_scores", title: "Encoder self-attention", rows: "tokens", cols: "tokens",
        rowName: "query token", colName: "key token" },
    ],
    translator: [
      { output: "cross_attention", title: "Cross-attention (target × source)", rows: "target_tokens",
        cols: "source_tokens", rowName: "target token", colName: "source token" },
      { output: "encoder_self_attention", title: "Encoder self-attention", rows: "source_tokens",
        cols: "source_tokens", rowName: "query token", colName: "key token" },
      { output: "decoder_self_attention", title: "Decoder self-attention", rows: "target_tokens",
        cols: "decoder_input_tokens", rowName: "target token", colName: "decoder input" },
    ],
  };

  // What each decoding control of a translator's `translate` does, after its range in its hint.
  const CONTROL_NOTES = {
    beam_width: "1 is greedy decoding",
    num_translations: "shown best first",
    temperature: "above 1 flattens the choice, below 1 sharpens it",
    top_k: "0 keeps every token",
    top_p: "1 keeps every token",
    seed: "the same seed draws the same translations",
  };

  // One sequential colour scale (light to dark blue), from 0 to the map's largest weight.
  const COLOUR_STOPS = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];

  const byId = (id) => document.getElementById(id);
  const form = byId("ask");
  const modelSelect = byId("model");
  const textBox = byId("text");
  const submitButton = byId("submit");
  const statusLine = byId("status");
  const errorLine = byId("error");
  const answerSection = byId("answer");
  const attentionSection = byId("attention");
  const heatmap = byId("heatmap");
  const mapSelect = byId("map");
  const layerSelect = byId("layer");
  const headSelect = byId("head");
  const cellInfo = byId("cell-info");
  const decoding = byId("decoding");
  const samplingBox = byId("sampling");
  const samplingControls = byId("sampling-controls");
  const controlInputs = Array.from(decoding.querySelectorAll("[data-control]"));

  let models = [];
  let busy = false;
  let shown = null; // { maps: [...] } of the last answer
  let activeCell = null; // [row, col] chosen with the keyboard
  let controlsShown = ""; // the model and controls the decoding fields were last set for

  class ServerError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  async function getJson(url, body) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
    let response;
    try {
      response = await fetch(url, body === undefined ? { signal: controller.signal } : {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
    } catch (error) {
      if (controller.signal.aborted) {
        throw new Error(`The server did not answer within ${REQUEST_TIMEOUT_MS / 1000} s.`);
      }
      throw new Error("Cannot reach the server: is it still running?");
    } finally {
      clearTimeout(timer);
    }
    const text = await response.text();
    let answer = null;
    try {
      answer = JSON.parse(text);
    } catch (error) {
      answer = null;
    }
    if (!response.ok) {
      const detail = answer && typeof answer.error === "string" ? answer.error : text.slice(0, 300);
      throw new ServerError(response.status, detail || response.statusText);
    }
    if (answer === null) {
      throw new Error("The server's answer is not JSON.");
    }
    return answer;
  }

  function predict(model, signature, text) {
    const url = `v1/models/${encodeURIComponent(model.name)}:predict`;
    return getJson(url, { signature_name: signature, instances: [text] }).then((answer) => answer.predictions[0]);
  }

  // A translator's `translate`, the controls as bare values beside the text: its
  // translations of the text, best first, as [{ text, score }].
  async function translate(model, text, controls) {
    const url = `v1/models/${encodeURIComponent(model.name)}:predict`;
    const answer = await getJson(url, {
      signature_name: model.request_controls.signature,
      inputs: { text: [text], ...controls },
    });
    const outputs = answer.outputs || {};
    if (!Array.isArray(outputs.translations) || !Array.isArray(outputs.scores)
        || !Array.isArray(outputs.translations[0]) || !Array.isArray(outputs.scores[0])) {
      throw new Error("The server's answer holds no translations and scores.");
    }
    return outputs.translations[0].map((translation, index) => ({
      text: typeof translation === "string" ? translation : "\ufffd",
      score: outputs.scores[0][index],
    }));
  }

  // A model's decoding controls (`request_controls` of /explorer/models), or null
  // for a model the page sends to serving_default: a classifier, or an export
  // (or a server) without the translate signature.
  function controlsOf(model) {
    return model && model.kind === "translator" && model.request_controls ? model.request_controls : null;
  }

  function controlLabel(input) {
    return document.querySelector(`label[for="${input.id}"]`).textContent;
  }

  function controlInput(name) {
    return controlInputs.find((input) => input.dataset.control === name) || null;
  }

  // A bound of a control's range: a number, or the name of another control
  // whose value in the same request it is (`values`, by control name).
  function boundOf(spec, key, values) {
    const bound = spec[key];
    return typeof bound === "string" ? values[bound] : bound;
  }

  // A control's range in words ("between 1 and 2", "above 0 and at most 1"),
  // as the server words it; null for a control of any value.
  function rangeText(spec, values) {
    const named = (key) => {
      const bound = spec[key];
      if (typeof bound !== "string") {
        return String(bound);
      }
      const input = controlInput(bound);
      return `${values[bound]} (the ${input ? controlLabel(input).toLowerCase() : bound})`;
    };
    const low = "exclusive_minimum" in spec ? `above ${spec.exclusive_minimum}`
      : "minimum" in spec ? `at least ${named("minimum")}` : null;
    if (!("maximum" in spec)) {
      return low;
    }
    if ("minimum" in spec) {
      return `between ${named("minimum")} and ${named("maximum")}`;
    }
    return low ? `${low} and at most ${named("maximum")}` : `at most ${named("maximum")}`;
  }

  function inRange(value, spec, values) {
    const minimum = boundOf(spec, "minimum", values);
    const maximum = boundOf(spec, "maximum", values);
    return (minimum === undefined || value >= minimum)
      && (maximum === undefined || value <= maximum)
      && (spec.exclusive_minimum === undefined || value > spec.exclusive_minimum);
  }

  // The value each numeric field holds now, by control name, NaN where it holds no number.
  function currentValues(controls) {
    const values = {};
    for (const [name, spec] of Object.entries(controls.inputs)) {
      const input = controlInput(name);
      values[name] = !input ? spec.default : input.type === "checkbox" ? input.checked
        : input.value.trim() === "" ? NaN : Number(input.value);
    }
    return values;
  }

  // Each field's limits and hint from the model's controls; a range bounded by
  // another control (the translations by the beam width) follows its value.
  function updateLimits(controls) {
    const values = currentValues(controls);
    for (const input of controlInputs) {
      const spec = controls.inputs[input.dataset.control];
      if (!spec || input.type === "checkbox") {
        continue;
      }
      const minimum = "minimum" in spec ? boundOf(spec, "minimum", values) : spec.exclusive_minimum;
      const maximum = boundOf(spec, "maximum", values);
      for (const [attribute, bound] of [["min", minimum], ["max", maximum]]) {
        if (Number.isFinite(bound)) {
          input.setAttribute(attribute, String(bound));
        } else {
          input.removeAttribute(attribute);
        }
      }
      const range = rangeText(spec, values) || (spec.dtype.startsWith("int") ? "any whole number" : "any number");
      const note = CONTROL_NOTES[input.dataset.control];
      const hint = `${range[0].toUpperCase()}${range.slice(1)}${note ? `; ${note}` : ""}.`;
      byId(input.getAttribute("aria-describedby")).textContent = hint;
    }
  }

  // Shows the decoding fields for `model`, set to its export's defaults; kept as
  // they are while the same version of the same model stays chosen.
  function showControls(model) {
    const controls = controlsOf(model);
    decoding.hidden = !controls;
    if (!controls) {
      controlsShown = "";
      return;
    }
    const key = JSON.stringify([model.name, model.version, controls]);
    if (key === controlsShown) {
      return;
    }
    controlsShown = key;
    for (const input of controlInputs) {
      const spec = controls.inputs[input.dataset.control];
      // A control this page does not know takes its default on the server; one
      // the export lacks is not shown.
      input.closest(".field").hidden = !spec;
      input.removeAttribute("aria-invalid");
      if (!spec) {
        continue;
      }
      if (input.type === "checkbox") {
        input.checked = Boolean(spec.default);
      } else {
        input.step = spec.dtype.startsWith("int") ? "1" : "any";
        input.value = String(spec.default);
      }
    }
    samplingControls.hidden = !samplingBox.checked;
    updateLimits(controls);
  }

  // The controls to send, by name, or { error, input } for the first field out of
  // its range. The sampling fields are sent only with sampling on: beam search
  // reads none of them.
  function readControls(controls) {
    const values = currentValues(controls);
    const sent = {};
    for (const input of controlInputs) {
      input.removeAttribute("aria-invalid");
    }
    for (const [name, spec] of Object.entries(controls.inputs)) {
      const input = controlInput(name);
      if (!input || input.closest("[hidden]")) {
        continue;
      }
      const value = values[name];
      if (input.type !== "checkbox") {
        const label = controlLabel(input);
        const whole = spec.dtype.startsWith("int");
        let problem = null;
        if (input.validity.badInput || Number.isNaN(value)) {
          problem = `${label} needs a number.`;
        } else if (whole && !Number.isSafeInteger(value)) {
          // A page's numbers are doubles: past 2^53 a whole number is no longer the one typed.
          problem = Number.isInteger(value)
            ? `${label} must be between ${-Number.MAX_SAFE_INTEGER} and ${Number.MAX_SAFE_INTEGER}, got ${input.value.trim()}.`
            : `${label} must be a whole number, got ${input.value.trim()}.`;
        } else if (!inRange(value, spec, values)) {
          problem = `${label} must be ${rangeText(spec, values)}, got ${input.value.trim()}.`;
        }
        if (problem) {
          input.setAttribute("aria-invalid", "true");
          return { error: problem, input };
        }
      }
      sent[name] = value;
    }
    return { values: sent };
  }

  function describe(error, model, controls) {
    if (!(error instanceof ServerError)) {
      return error.message;
    }
    switch (error.status) {
      case 404:
        return `Model "${model.name}" is not being served any more (${error.message}).`;
      case 400:
        return controls
          ? `The server refused this request: ${error.message}`
          : `The model refused this text: ${error.message}`;
      case 413:
        return `The text or its answer is too large for the server: ${error.message}`;
      case 503:
      case 504:
        return `The server is busy (${error.status}): ${error.message} Try again in a moment.`;
      default:
        return `The server failed (${error.status}): ${error.message}`;
    }
  }

  function showError(message) {
    errorLine.textContent = message;
    errorLine.hidden = !message;
  }

  function selectedModel() {
    return models.find((model) => model.name === modelSelect.value) || null;
  }

  function modelLabel(model) {
    if (model.version === null) {
      return `${model.name} (no version loaded)`;
    }
    if (model.kind === "other") {
      return `${model.name} (version ${model.version}, not a classifier or translator)`;
    }
    return `${model.name} (${model.kind}, version ${model.version})`;
  }

  async function loadModels() {
    const previous = modelSelect.value;
    let answer;
    try {
      answer = await getJson("explorer/models");
    } catch (error) {
      showError(`Cannot list the models: ${error.message}`);
      return;
    }
    models = answer.models;
    modelSelect.replaceChildren();
    for (const model of models) {
      const option = new Option(modelLabel(model), model.name);
      option.disabled = model.version === null || model.kind === "other";
      modelSelect.append(option);
    }
    if (!models.length) {
      modelSelect.append(new Option("No models are served", ""));
    }
    const usable = models.filter((model) => model.version !== null && model.kind !== "other");
    const keep = usable.find((model) => model.name === previous);
    modelSelect.value = keep ? keep.name : usable.length ? usable[0].name : "";
    modelSelect.disabled = !models.length;
    submitButton.disabled = busy || !usable.length;
    showControls(selectedModel());
  }

  async function explore(event) {
    event.preventDefault();
    if (busy) {
      return;
    }
    const model = selectedModel();
    const text = textBox.value;
    if (!model || model.version === null) {
      showError("Choose a model that is loaded.");
      modelSelect.focus();
      return;
    }
    if (!text.trim()) {
      showError("Type a text first: the model has nothing to read.");
      textBox.focus();
      return;
    }
    let controls = null;
    if (controlsOf(model)) {
      const read = readControls(controlsOf(model));
      if (read.error) {
        showError(read.error);
        read.input.focus();
        return;
      }
      controls = read.values;
    }
    showError("");
    busy = true;
    submitButton.disabled = true;
    form.setAttribute("aria-busy", "true");
    statusLine.textContent = `Asking ${model.name}…`;
    try {
      const [answer, attention] = await Promise.allSettled([
        controls ? translate(model, text, controls) : predict(model, "serving_default", text),
        model.attention ? predict(model, "attention", text) : Promise.resolve(null),
      ]);
      if (answer.status === "rejected") {
        answerSection.hidden = true;
        attentionSection.hidden = true;
        statusLine.textContent = "";
        showError(describe(answer.reason, model, controls));
        if (answer.reason instanceof ServerError && answer.reason.status === 404) {
          await loadModels();
        }
        return;
      }
      showAnswer(model, answer.value, controls);
      showNotice(model);
      if (!model.attention) {
        // A notice already says why (a classifier whose answer is the bag of n-grams' alone).
        showAttentionMessage(model.attention_notice ? "" : "This export has no attention signature to draw.");
      } else if (attention.status === "rejected") {
        const tooLarge = attention.reason instanceof ServerError && attention.reason.status === 413;
        showAttentionMessage(tooLarge
          ? `No attention to show: this text's weights are more than the server sends in one answer (${attention.reason.message}). Try a shorter text, or start the server with a larger --max-response-bytes.`
          : `No attention to show. ${describe(attention.reason, model)}`);
      } else {
        showAttention(model, attention.value, controls);
      }
      statusLine.textContent = `${model.name} answered.`;
    } finally {
      busy = false;
      form.removeAttribute("aria-busy");
      submitButton.disabled = false;
    }
  }

  // `prediction`: a classifier's outputs, a translation, or with `controls` the
  // ranked [{ text, score }] of `translate`.
  function showAnswer(model, prediction, controls) {
    const answerText = byId("answer-text");
    const bars = byId("probabilities");
    const ranked = byId("translations");
    bars.replaceChildren();
    ranked.replaceChildren();
    ranked.hidden = !controls;
    answerText.hidden = Boolean(controls);
    if (model.kind === "classifier") {
      byId("answer-title").textContent = "Predicted label";
      answerText.textContent = prediction.label;
      prediction.probabilities.forEach((probability, index) => {
        const name = model.class_names && model.class_names[index] !== undefined ? model.class_names[index] : `class ${index}`;
        const row = document.createElement("div");
        row.className = "bar-row";
        row.dataset.className = name;
        row.dataset.probability = String(probability);
        const label = document.createElement("span");
        label.className = "bar-label";
        label.textContent = name;
        const track = document.createElement("span");
        track.className = "bar-track";
        const fill = document.createElement("span");
        fill.className = "bar-fill";
        fill.style.width = `${(100 * probability).toFixed(2)}%`;
        track.append(fill);
        const value = document.createElement("span");
        value.className = "bar-value";
        value.textContent = `${(100 * probability).toFixed(1)}%`;
        row.append(label, track, value);
        bars.append(row);
      });
    } else if (controls) {
      byId("answer-title").textContent = prediction.length === 1 ? "Translation" : "Translations, best first";
      answerText.textContent = "";
      for (const { text, score } of prediction) {
        const item = document.createElement("li");
        item.dataset.score = String(score);
        const words = document.createElement("span");
        words.className = "ranked-text";
        words.textContent = text;
        words.classList.toggle("empty", !text);
        const value = document.createElement("span");
        value.className = "ranked-score";
        value.textContent = `score ${score.toFixed(3)}`;
        item.append(words, value);
        ranked.append(item);
      }
    } else {
      byId("answer-title").textContent = "Translation";
      answerText.textContent = prediction;
    }
    answerText.classList.toggle("empty", !answerText.textContent);
    answerSection.hidden = false;
  }

  function showAttentionMessage(message) {
    shown = null;
    attentionSection.hidden = false;
    byId("attention-view").hidden = true;
    const line = byId("attention-message");
    line.textContent = message;
    line.hidden = !message;
  }

  // What the server says a reader of this model's attention should know
  // (`attention_notice` of /explorer/models), above the maps; none, no note.
  function showNotice(model) {
    const notice = byId("attention-notice");
    notice.textContent = model.attention_notice || "";
    notice.hidden = !model.attention_notice;
  }

  // The tokens before the padding (""); a token that is not UTF-8 comes as {"b64": ...}.
  function realTokens(tokens) {
    const end = tokens.indexOf("");
    return (end < 0 ? tokens : tokens.slice(0, end)).map((token) => (typeof token === "string" ? token : "\ufffd"));
  }

  function showAttention(model, outputs, controls) {
    const maps = [];
    for (const spec of MAPS[model.kind] || []) {
      if (!Array.isArray(outputs[spec.output])) {
        continue;
      }
      const rows = realTokens(outputs[spec.rows]);
      const cols = realTokens(outputs[spec.cols]);
      if (rows.length && cols.length) {
        const weights = outputs[spec.output];
        maps.push({ ...spec, rowTokens: rows, colTokens: cols, weights, scaleMax: largestWeight(weights, rows, cols) });
      }
    }
    if (!maps.length) {
      showAttentionMessage("This text gives no tokens, so there is no attention to show.");
      return;
    }
    shown = { maps };
    showDecodingNote(model, outputs, controls);
    fillSelect(mapSelect, maps.map((map) => map.title));
    fillLayerAndHead();
    byId("attention-message").hidden = true;
    byId("attention-view").hidden = false;
    attentionSection.hidden = false;
    draw();
  }

  // The answer comes from beam search or sampling, the attention from the greedy
  // decoding (one token at a time, each the most likely): the two may differ,
  // so the page says which translation the rows belong to.
  function showDecodingNote(model, outputs, controls) {
    const note = byId("decoding-note");
    note.hidden = model.kind !== "translator" || !Array.isArray(outputs.target_tokens);
    if (!note.hidden) {
      const words = realTokens(outputs.target_tokens).filter((token) => token !== "[END]");
      const text = words.map((token) => (token.startsWith("##") ? token.slice(2) : ` ${token}`)).join("").trim();
      let source = "the translation above comes from beam search, so the two can differ";
      if (controls && !controls.sampling && controls.beam_width === 1) {
        source = "with a beam width of 1 the translation above is greedy too";
      } else if (controls) {
        const how = controls.sampling ? "sampled" : `from beam search (width ${controls.beam_width})`;
        source = controls.num_translations > 1
          ? `the translations above are ${how}, so they can differ from it`
          : `the translation above is ${how}, so the two can differ`;
      }
      note.textContent = `The maps follow the greedy translation “${text}”; ${source}.`;
    }
  }

  // A map's colour scale runs from 0 to its largest weight over every layer and
  // head, so heads compare at a glance; a decoder's first row always holds a 1,
  // which would wash out the other maps' scales if they shared it.
  function largestWeight(weights, rows, cols) {
    let largest = 0;
    for (const layer of weights) {
      for (const head of layer) {
        for (let row = 0; row < rows.length; row++) {
          for (let col = 0; col < cols.length; col++) {
            largest = Math.max(largest, head[row][col]);
          }
        }
      }
    }
    return largest || 1;
  }

  function fillSelect(select, labels) {
    const previous = select.selectedIndex;
    select.replaceChildren(...labels.map((label, index) => new Option(label, String(index))));
    select.selectedIndex = previous >= 0 && previous < labels.length ? previous : 0;
  }

  function fillLayerAndHead() {
    const map = shown.maps[mapSelect.selectedIndex];
    const layers = map.weights.length;
    const heads = map.weights[0].length;
    fillSelect(layerSelect, Array.from({ length: layers }, (_, index) => `${index + 1} of ${layers}`));
    fillSelect(headSelect, Array.from({ length: heads }, (_, index) => `${index + 1} of ${heads}`));
  }

  function colour(weight, scaleMax) {
    const position = Math.min(Math.max(weight / scaleMax, 0), 1) * (COLOUR_STOPS.length - 1);
    const low = Math.min(Math.floor(position), COLOUR_STOPS.length - 2);
    const fraction = position - low;
    const [a, b] = [COLOUR_STOPS[low], COLOUR_STOPS[low + 1]];
    const channels = a.map((value, index) => Math.round(value + (b[index] - value) * fraction));
    return `rgb(${channels.join(", ")})`;
  }

  function tokenLabel(className, token) {
    const label = document.createElement("div");
    label.className = className;
    label.textContent = token;
    label.title = token;
    return label;
  }

  function draw() {
    if (!shown) {
      return;
    }
    const map = shown.maps[mapSelect.selectedIndex];
    const layer = layerSelect.selectedIndex;
    const head = headSelect.selectedIndex;
    const matrix = map.weights[layer][head];
    const rows = map.rowTokens.slice(0, MAX_SHOWN_TOKENS);
    const cols = map.colTokens.slice(0, MAX_SHOWN_TOKENS);
    // Token labels take a fifth of a phone's width, at most 96 px.
    const labelWidth = Math.min(96, Math.round(window.innerWidth / 5));
    const room = byId("heatmap-scroll").clientWidth - labelWidth - 8;
    const cell = Math.max(12, Math.min(32, Math.floor(room / cols.length)));
    heatmap.style.gridTemplateColumns = `${labelWidth}px repeat(${cols.length}, ${cell}px)`;
    heatmap.style.gridAutoRows = `${cell}px`;
    heatmap.dataset.map = map.output;
    heatmap.dataset.layer = String(layer);
    heatmap.dataset.head = String(head);
    heatmap.dataset.rows = String(rows.length);
    heatmap.dataset.cols = String(cols.length);
    heatmap.setAttribute("aria-label",
      `${map.title}, layer ${layer + 1}, head ${head + 1}: ${rows.length} ${map.rowName}s by ${cols.length} ${map.colName}s`);
    const parts = document.createDocumentFragment();
    const corner = document.createElement("div");
    corner.className = "corner";
    parts.append(corner);
    for (const token of cols) {
      parts.append(tokenLabel("col-label", token));
    }
    rows.forEach((rowToken, row) => {
      parts.append(tokenLabel("row-label", rowToken));
      cols.forEach((_, col) => {
        const weight = matrix[row][col];
        const box = document.createElement("div");
        box.className = "cell";
        box.dataset.row = String(row);
        box.dataset.col = String(col);
        box.dataset.weight = String(weight);
        box.style.backgroundColor = colour(weight, map.scaleMax);
        parts.append(box);
      });
    });
    heatmap.replaceChildren(parts);
    byId("legend-high").textContent = map.scaleMax.toFixed(3);
    byId("legend-text").textContent = `Colour scale from 0 (lightest) to ${map.scaleMax.toFixed(3)} (darkest).`;
    byId("map-caption").textContent =
      `Rows: ${map.rowName}s; columns: ${map.colName}s. Each row's weights sum to 1 over the columns.`;
    const truncated = byId("truncated");
    const cut = map.rowTokens.length > rows.length || map.colTokens.length > cols.length;
    truncated.hidden = !cut;
    truncated.textContent = cut
      ? `Showing the first ${rows.length} of ${map.rowTokens.length} rows and ${cols.length} of ${map.colTokens.length} columns.`
      : "";
    activeCell = null;
    cellInfo.textContent = "\u00a0";
  }

  function describeCell(row, col) {
    const map = shown.maps[mapSelect.selectedIndex];
    const weight = map.weights[layerSelect.selectedIndex][headSelect.selectedIndex][row][col];
    cellInfo.textContent =
      `${map.rowName} “${map.rowTokens[row]}” → ${map.colName} “${map.colTokens[col]}”: ${weight.toFixed(4)}`;
  }

  function markActive(row, col) {
    const previous = heatmap.querySelector(".cell.active");
    if (previous) {
      previous.classList.remove("active");
    }
    const box = heatmap.querySelector(`.cell[data-row="${row}"][data-col="${col}"]`);
    if (box) {
      box.classList.add("active");
    }
    activeCell = [row, col];
    describeCell(row, col);
  }

  heatmap.addEventListener("mouseover", (event) => {
    const box = event.target.closest(".cell");
    if (box) {
      describeCell(Number(box.dataset.row), Number(box.dataset.col));
    }
  });

  heatmap.addEventListener("keydown", (event) => {
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (!shown || !moves[event.key]) {
      return;
    }
    event.preventDefault();
    if (!activeCell) {
      markActive(0, 0);
      return;
    }
    const [rowStep, colStep] = moves[event.key];
    const clamp = (value, size) => Math.min(Math.max(value, 0), size - 1);
    markActive(clamp(activeCell[0] + rowStep, Number(heatmap.dataset.rows)),
      clamp(activeCell[1] + colStep, Number(heatmap.dataset.cols)));
  });

  textBox.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  form.addEventListener("submit", explore);
  modelSelect.addEventListener("change", () => showControls(selectedModel()));
  samplingBox.addEventListener("change", () => {
    samplingControls.hidden = !samplingBox.checked;
  });
  decoding.addEventListener("input", () => {
    const controls = controlsOf(selectedModel());
    if (controls) {
      updateLimits(controls);
    }
  });
  mapSelect.addEventListener("change", () => {
    fillLayerAndHead();
    draw();
  });
  layerSelect.addEventListener("change", draw);
  headSelect.addEventListener("change", draw);

  const ramp = document.querySelector(".legend-ramp");
  ramp.style.background = `linear-gradient(to right, ${COLOUR_STOPS.map((stop) => `rgb(${stop.join(", ")})`).join(", ")})`;
  loadModels();
})();
