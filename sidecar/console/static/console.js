// shadowtrial console: refresh [data-refresh] regions while the tab is visible.
// Pauses in hidden tabs, refreshes at once when shown again, retries transient errors with
// backoff, and stops (saying why) when the session ends or the page is gone. No library.
(function () {
  "use strict";

  function start(region) {
    var url = region.getAttribute("data-refresh");
    var every = parseInt(region.getAttribute("data-interval") || "5000", 10);
    var statusId = region.getAttribute("data-status");
    var status = statusId ? document.getElementById(statusId) : null;
    var timer = null;
    var failures = 0;
    var busy = false;
    var stopped = false;

    function say(text) { if (status) { status.textContent = text; } }
    function schedule(ms) { clearTimeout(timer); if (!stopped) { timer = setTimeout(tick, ms); } }
    function stop(text) { stopped = true; clearTimeout(timer); say(text); }

    function tick() {
      if (document.hidden || busy || stopped) { return; }
      busy = true;
      fetch(url, { credentials: "same-origin", cache: "no-store", redirect: "manual",
                   headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (r.type === "opaqueredirect" || r.status === 401) { stop("Your session ended: reload the page to sign in."); return; }
          if (r.status === 403 || r.status === 404) { stop("Updates stopped (" + r.status + "): reload the page."); return; }
          if (!r.ok) { throw new Error("status " + r.status); }
          return r.text().then(function (html) {
            var doc = new DOMParser().parseFromString(html, "text/html");
            region.replaceChildren.apply(region, Array.prototype.slice.call(doc.body.childNodes));
            region.setAttribute("data-updated", String(Date.now()));
            failures = 0;
            say("");
            // Terminal work (a [data-final] element in the update) stops the updates.
            if (region.querySelector("[data-final]")) { stop(""); return; }
            schedule(every);
          });
        })
        .catch(function (err) {
          failures += 1;
          var wait = Math.min(every * Math.pow(2, failures), 60000);
          say("Update failed (" + err.message + "); retrying in " + Math.round(wait / 1000) + " s.");
          schedule(wait);
        })
        .finally(function () { busy = false; });
    }

    document.addEventListener("visibilitychange", function () {
      if (document.hidden) { clearTimeout(timer); } else { schedule(0); }
    });
    schedule(every);
  }

  function init() {
    var regions = document.querySelectorAll("[data-refresh]");
    for (var i = 0; i < regions.length; i += 1) { start(regions[i]); }
    var error = document.getElementById("form-error");
    if (error) { error.focus(); }
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
}());
