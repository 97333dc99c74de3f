// shadowtrial console: Compare. Posts the form as JSON and reads the server-sent events of the
// answer as they stream (fetch + a reader; no library). Every answer is set with textContent:
// model output is text, never HTML.
(function () {
  "use strict";

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function usd(cost) {
    if (!cost || cost.coverage === "unknown") { return "unknown"; }
    var text = "$" + (cost.known_micros / 1e6).toFixed(6);
    return cost.coverage === "partial" ? text + " known (partial)" : text;
  }

  function init() {
    var form = document.getElementById("compare-form");
    if (!form) { return; }
    var status = document.getElementById("compare-status");
    var errorBox = document.getElementById("compare-error");
    var answers = document.getElementById("answers");
    var done = document.getElementById("compare-done");
    var running = false;
    // Models in the order they were checked: the first is the incumbent of "Make it a trial".
    var order = [];
    form.addEventListener("change", function (e) {
      var box = e.target;
      if (!box || box.name !== "models") { return; }
      order = order.filter(function (m) { return m !== box.value; });
      if (box.checked) { order.push(box.value); }
    });

    function fail(text) {
      errorBox.textContent = text;
      errorBox.hidden = false;
      errorBox.focus();
      status.textContent = "";
    }

    function column(model) {
      var col = el("article", "answer-col");
      col.setAttribute("data-model", model);
      col.setAttribute("aria-label", "Answer of " + model);
      col.appendChild(el("h3", "", model));
      if (model === form.elements.incumbent.value) { col.appendChild(el("p", "small role", "Incumbent")); }
      var facts = el("dl", "facts");
      ["Latency", "Cost", "Judge score", "Judge version"].forEach(function (name) {
        facts.appendChild(el("dt", "", name));
        var dd = el("dd", "", "…");
        dd.setAttribute("data-fact", name.toLowerCase().replace(/ /g, "-"));
        facts.appendChild(dd);
      });
      col.appendChild(facts);
      var text = el("div", "answer-text", "Waiting for the answer…");
      text.setAttribute("data-part", "answer");
      col.appendChild(text);
      return col;
    }

    function fact(model, name, text) {
      var col = answers.querySelector('[data-model="' + CSS.escape(model) + '"]');
      if (!col) { return null; }
      var node = name === "answer" ? col.querySelector('[data-part="answer"]') : col.querySelector('[data-fact="' + name + '"]');
      node.textContent = text;
      return col;
    }

    function handle(event, data) {
      if (event === "answer") {
        var col = fact(data.model, "answer", data.ok ? (data.content || "") : "No answer: " + (data.error || "failed"));
        if (col) { col.setAttribute("data-state", data.ok ? "answered" : "failed"); }
        fact(data.model, "latency", Math.round(data.latency_ms) + " ms");
        fact(data.model, "cost", usd(data.cost));
      } else if (event === "score") {
        fact(data.model, "judge-score", data.score !== null && data.score !== undefined
          ? data.score + " / 10" : "none (" + (data.error || "no score") + ")");
        var jv = data.judge_version || {};
        fact(data.model, "judge-version", jv.id ? (jv.name || jv.family || "judge") + " " + String(jv.id).slice(0, 12) +
          (jv.model ? " (" + jv.model + ")" : "") : "—");
      } else if (event === "done") {
        var hint = data.trial_hint || {};
        var body = hint.body || {};
        var params = new URLSearchParams();
        ["team", "incumbent_model", "candidate_model", "spend_cap_usd", "sample_rate"].forEach(function (k) {
          if (body[k] !== undefined) { params.set(k, String(body[k])); }
        });
        done.textContent = "";
        done.appendChild(el("span", "", "Done in " + Math.round(data.elapsed_ms) + " ms; spent " + usd(data.spend) +
          " of the $" + (data.spend.cap_micros / 1e6).toFixed(2) + " cap. Nothing was kept. "));
        var link = el("a", "button", "Make it a trial");
        link.id = "make-trial";
        link.href = form.getAttribute("data-trial") + "?" + params.toString();
        done.appendChild(link);
        done.hidden = false;
        status.textContent = "Done.";
        status.classList.add("done");
      }
    }

    function parse(block) {
      var event = "message";
      var data = [];
      block.split("\n").forEach(function (line) {
        if (line.indexOf("event:") === 0) { event = line.slice(6).trim(); }
        else if (line.indexOf("data:") === 0) { data.push(line.slice(5).replace(/^ /, "")); }
      });
      if (data.length) { handle(event, JSON.parse(data.join("\n"))); }
    }

    form.addEventListener("submit", function (e) {
      e.preventDefault();
      if (running) { return; }
      errorBox.hidden = true;
      done.hidden = true;
      status.classList.remove("done");
      var checked = Array.prototype.slice.call(form.querySelectorAll('input[name="models"]:checked'))
        .map(function (box) { return box.value; });
      var incumbent = form.elements.incumbent.value;
      if (!incumbent) { fail("Choose the incumbent: the model your gateway serves today."); return; }
      // The incumbent first, chosen explicitly; then the candidates in the order checked.
      var models = [incumbent].concat(order.filter(function (m) { return checked.indexOf(m) >= 0 && m !== incumbent; }));
      checked.forEach(function (m) { if (models.indexOf(m) < 0) { models.push(m); } });
      var least = parseInt(form.getAttribute("data-min-models"), 10) || 2;
      if (models.length < least) {
        fail("Choose at least one candidate besides the incumbent " + incumbent + ": Compare needs " + least + " models or more.");
        return;
      }
      var body = {
        team: form.elements.team.value,
        messages: [{ role: "user", content: form.elements.prompt.value }],
        models: models
      };
      var cap = parseFloat(form.elements.spend_cap_usd.value);
      if (!isNaN(cap)) { body.spend_cap_usd = cap; }
      var maxTokens = parseInt(form.elements.max_tokens.value, 10);
      if (!isNaN(maxTokens)) { body.max_tokens = maxTokens; }
      answers.textContent = "";
      models.forEach(function (m) { answers.appendChild(column(m)); });
      running = true;
      status.textContent = "Asking " + models.length + " model(s)…";
      fetch(form.getAttribute("data-stream"), {
        method: "POST", credentials: "same-origin", cache: "no-store", redirect: "manual",
        headers: { "Content-Type": "application/json", "Accept": "text/event-stream",
                   "X-CSRF-Token": form.getAttribute("data-csrf") },
        body: JSON.stringify(body)
      }).then(function (r) {
        if (r.type === "opaqueredirect" || r.status === 401) { throw new Error("your session ended: reload the page to sign in"); }
        if (!r.ok) {
          return r.json().then(function (j) {
            var err = j.error || {};
            answers.textContent = "";
            fail("Compare refused: " + (err.message || ("status " + r.status)) + (err.code ? " (" + err.code + ")" : ""));
          }, function () { throw new Error("status " + r.status); });
        }
        var reader = r.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) { if (buffer.trim()) { parse(buffer); } return; }
            buffer += decoder.decode(chunk.value, { stream: true });
            var cut;
            while ((cut = buffer.indexOf("\n\n")) >= 0) {
              parse(buffer.slice(0, cut));
              buffer = buffer.slice(cut + 2);
            }
            return pump();
          });
        }
        return pump();
      }).catch(function (err) {
        fail("Compare failed: " + err.message);
      }).finally(function () { running = false; });
    });
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
}());
