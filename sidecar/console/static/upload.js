// shadowtrial console: a dataset import with upload progress (XMLHttpRequest reports it; fetch
// does not). The form still works without script: it posts and the server redirects.
(function () {
  "use strict";

  function init() {
    var form = document.getElementById("import-form");
    if (!form) { return; }
    var row = document.getElementById("import-progress-row");
    var bar = document.getElementById("import-progress");
    var text = document.getElementById("import-progress-text");
    var errorBox = document.getElementById("import-error");
    var button = document.getElementById("import-dataset");

    form.addEventListener("submit", function (e) {
      e.preventDefault();
      errorBox.hidden = true;
      var xhr = new XMLHttpRequest();
      xhr.open("POST", form.getAttribute("action"));
      xhr.setRequestHeader("X-CSRF-Token", form.getAttribute("data-csrf"));
      xhr.setRequestHeader("X-Console-Script", "1");
      xhr.responseType = "json";
      row.hidden = false;
      bar.value = 0;
      text.textContent = "Uploading…";
      button.disabled = true;
      xhr.upload.addEventListener("progress", function (ev) {
        if (ev.lengthComputable) {
          bar.value = Math.round(100 * ev.loaded / ev.total);
          text.textContent = "Uploaded " + bar.value + "% (" + ev.loaded + " of " + ev.total + " bytes)";
        }
      });
      xhr.upload.addEventListener("load", function () {
        bar.value = 100;
        text.textContent = "Uploaded; the control plane is checking the items…";
      });
      xhr.addEventListener("load", function () {
        button.disabled = false;
        var body = xhr.response || {};
        if (xhr.status === 201 && body.location) {
          text.textContent = "Imported.";
          window.location.assign(body.location);
          return;
        }
        var err = body.error || {};
        errorBox.textContent = "Not imported (" + xhr.status + " " + (err.code || "error") + "): " +
          (err.message || "the control plane refused the file") + (err.field ? " [field " + err.field + "]" : "");
        errorBox.hidden = false;
        errorBox.focus();
        text.textContent = "Upload complete; the file was refused.";
      });
      xhr.addEventListener("error", function () {
        button.disabled = false;
        errorBox.textContent = "The upload failed: the control plane could not be reached. Try again.";
        errorBox.hidden = false;
        errorBox.focus();
      });
      xhr.send(new FormData(form));
    });
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
}());
