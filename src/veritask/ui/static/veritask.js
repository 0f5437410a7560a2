// Veritask's own script: no framework. It reports the browser's time zone (a cookie the
// server renders dates with), keeps [data-live] regions fresh when the server-sent events
// say the ledger moved, follows a growing log, numbers the editor's lines, and submits the
// language choice. Every page works without it, only without live updates.
(function () {
  "use strict";

  function cookie(name) {
    var found = document.cookie.split("; ").find(function (c) { return c.indexOf(name + "=") === 0; });
    return found ? decodeURIComponent(found.slice(name.length + 1)) : null;
  }

  // -- time zone: rendered by the server, reported by the browser once ----------------------
  // Only a page that shows times is loaded again in the new zone: the sign-in page shows
  // none, and a reload there would wipe a token just pasted into its form.
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (zone && cookie("veritask_tz") !== zone) {
    document.cookie = "veritask_tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; samesite=lax";
    if (cookie("veritask_tz") === zone && document.querySelector("time[datetime]") &&
        !sessionStorage.getItem("veritask-tz-reload")) {
      sessionStorage.setItem("veritask-tz-reload", "1");  // at most once: never a reload loop
      location.reload();
      return;
    }
  }

  // -- live regions ---------------------------------------------------------------------------
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Veritask-Live": "1" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (region) {
          var replacement = fresh.getElementById(region.id);
          if (replacement) region.replaceWith(document.importNode(replacement, true));
        });
        document.dispatchEvent(new CustomEvent("veritask:refreshed"));
      })
      .catch(function () { /* the next change tries again */ })
      .finally(function () {
        busy = false;
        if (again) { again = false; setTimeout(refresh, 250); }
      });
  }
  var stream = document.body.dataset.liveStream;
  if (stream && window.EventSource) {
    var source = new EventSource(stream);
    source.addEventListener("changed", refresh);
  }

  // -- the log follows ------------------------------------------------------------------------
  var log = document.querySelector("[data-follow-log]");
  function follow() {
    if (!log || log.dataset.ended === "yes") return;
    var url = log.dataset.followLog + "&offset=" + encodeURIComponent(log.dataset.offset);
    fetch(url, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (chunk) {
        if (!chunk) return;
        if (chunk.text) {
          var atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
          log.appendChild(document.createTextNode(chunk.text));  // text, never markup
          if (atBottom) log.scrollTop = log.scrollHeight;
        }
        log.dataset.offset = String(chunk.next_offset);
        if (chunk.ended && !chunk.text) log.dataset.ended = "yes";
      })
      .catch(function () {})
      .finally(function () { if (log.dataset.ended !== "yes") setTimeout(follow, 1000); });
  }
  if (log) { log.scrollTop = log.scrollHeight; setTimeout(follow, 1000); }

  // -- the editor's line numbers --------------------------------------------------------------
  var source = document.getElementById("source");
  var gutter = document.querySelector(".editor .gutter");
  if (source && gutter) {
    var renumber = function () {
      var count = source.value.split("\n").length;
      var items = gutter.children;
      for (var i = items.length; i < count; i++) {
        var item = document.createElement("li");
        item.textContent = String(i + 1);
        gutter.appendChild(item);
      }
      for (var j = items.length - 1; j >= count; j--) gutter.removeChild(items[j]);
    };
    source.addEventListener("input", renumber);
    source.addEventListener("scroll", function () { gutter.scrollTop = source.scrollTop; });
    document.querySelectorAll("[data-goto-line]").forEach(function (link) {
      link.addEventListener("click", function (event) {
        event.preventDefault();
        var line = Number(link.dataset.gotoLine), lines = source.value.split("\n");
        var start = lines.slice(0, line - 1).join("\n").length + (line > 1 ? 1 : 0);
        source.focus();
        source.setSelectionRange(start, start + (lines[line - 1] || "").length);
      });
    });
  }

  // -- the language choice submits itself -----------------------------------------------------
  document.querySelectorAll("form[data-autosubmit] select").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });
})();
