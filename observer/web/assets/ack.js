// Acknowledges a finding through the JSON API. The request is JSON with
// credentials in a header, which a cross-site page cannot send: the
// server refuses anything else.
(function () {
  "use strict";
  var form = document.getElementById("ack");
  if (!form) return;
  var out = document.getElementById("ack-result");
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var h = { "Content-Type": "application/json" };
    var token = form.elements.token.value.trim();
    if (token) h["Authorization"] = "Bearer " + token;
    out.textContent = "…";
    fetch("/api/findings/" + form.dataset.id + "/ack", {
      method: "POST", headers: h, credentials: "same-origin",
      body: JSON.stringify({ reason: form.elements.reason.value })
    }).then(function (resp) {
      return resp.text().then(function (body) {
        if (resp.ok) { window.location.reload(); return; }
        out.textContent = resp.status + ": " + body;
      });
    }).catch(function (err) { out.textContent = String(err); });
  });
})();
