// shadowtrial console: side panels. A link with data-panel-open="ID" opens the panel ID
// (without script it is a plain link, and the server renders the panel open). Escape or a
// [data-panel-close] link closes it, and focus returns to the row's link that opened it.
(function () {
  "use strict";

  var open = null;
  var opener = null;

  function close() {
    if (!open) { return; }
    open.hidden = true;
    open = null;
    if (opener) { opener.focus(); }
    opener = null;
  }

  function show(panel, from) {
    if (open && open !== panel) { open.hidden = true; }
    open = panel;
    opener = from;
    panel.hidden = false;
    panel.focus();
  }

  function init() {
    document.addEventListener("click", function (e) {
      var target = e.target.closest ? e.target.closest("[data-panel-open], [data-panel-close]") : null;
      if (!target) { return; }
      if (target.hasAttribute("data-panel-close")) {
        e.preventDefault();
        close();
        return;
      }
      var panel = document.getElementById(target.getAttribute("data-panel-open"));
      if (!panel) { return; }
      e.preventDefault();
      show(panel, target);
    });
    document.addEventListener("keydown", function (e) {
      if (e.key === "Escape" && open) { e.preventDefault(); close(); }
    });
    // A panel the server rendered open (after a start, or with ?open=): its opener is its row's link.
    var shown = document.querySelector(".panel:not([hidden])");
    if (shown) {
      open = shown;
      opener = document.querySelector('[data-panel-open="' + shown.id + '"]');
      shown.focus();
    }
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
}());
