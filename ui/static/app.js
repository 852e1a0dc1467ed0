// skiplock dashboard: live refresh of the queues page, select-all on the dead page,
// confirmation of destructive buttons. No framework, no build step.
(function () {
  "use strict";

  // Live: fetch the server-rendered fragment and swap it in, without reloading the page.
  function live() {
    var box = document.getElementById("live");
    if (!box || !box.dataset.src) return;
    var status = document.getElementById("live-status");
    var every = Math.max(500, parseInt(box.dataset.interval, 10) || 2000);
    var busy = false;
    function tick() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(box.dataset.src, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          box.innerHTML = html; // server-rendered by html/template: every value escaped
          if (status) status.textContent = "live · updated " + new Date().toLocaleTimeString();
          box.dispatchEvent(new CustomEvent("skiplock:updated", { bubbles: true }));
        })
        .catch(function (e) {
          if (status) status.textContent = "live · not updating (" + e.message + "), retrying";
        })
        .finally(function () { busy = false; });
    }
    setInterval(tick, every);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) tick(); });
  }

  // Select all, and a count of the selection next to the bulk buttons.
  function selection() {
    var all = document.querySelector("input[data-select-all]");
    var counter = document.querySelector("[data-selected-count]");
    var boxes = function () { return document.querySelectorAll('input[type=checkbox][name=id]'); };
    function update() {
      var n = 0;
      boxes().forEach(function (b) { if (b.checked) n++; });
      if (counter) counter.textContent = n ? n + " selected:" : "Select jobs, then";
    }
    if (all) all.addEventListener("change", function () {
      boxes().forEach(function (b) { b.checked = all.checked; });
      update();
    });
    document.addEventListener("change", function (e) {
      if (e.target.name === "id") update();
    });
  }

  // Ask before a destructive button submits its form.
  function confirmations() {
    document.addEventListener("click", function (e) {
      var b = e.target.closest("button[data-confirm]");
      if (b && !window.confirm(b.dataset.confirm)) e.preventDefault();
    });
  }

  // A page that reloads itself (the workers page) waits while jobs are selected, so a
  // reload never drops a selection about to be acted on.
  function reload() {
    var secs = parseInt(document.body.dataset.reload || "0", 10);
    if (!secs) return;
    setInterval(function () {
      if (!document.querySelector('input[type=checkbox][name=id]:checked')) window.location.reload();
    }, secs * 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    live();
    reload();
    selection();
    confirmations();
  });
})();
