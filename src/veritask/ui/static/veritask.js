// Veritask's own script: no framework. It reports the browser's time zone (a cookie the
// server renders dates with), keeps [data-live] regions fresh when the server-sent events
// say the ledger moved, moves the run page through time (the scrubber), follows a growing log, runs the log viewer, zooms and pans the task
// graphs, numbers the editor's lines, and submits the language choice. Every page works
// without it, only without live updates.
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
  // Swaps in the [data-live] regions of a freshly rendered page.
  function swapIn(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-live]").forEach(function (region) {
      var replacement = fresh.getElementById(region.id);
      if (!replacement) return;
      // What the reader opened (a fold of the history, an event's evidence) stays open.
      var opened = Array.prototype.map.call(
        region.querySelectorAll("details[open][id]"), function (d) { return d.id; });
      var imported = document.importNode(replacement, true);
      opened.forEach(function (id) {
        var again = imported.querySelector("#" + CSS.escape(id));
        if (again) again.open = true;
      });
      region.replaceWith(imported);
    });
    document.dispatchEvent(new CustomEvent("veritask:refreshed"));
  }
  // A page shown as of an instant (the run's time scrubber) stays there: live news waits.
  function scrubbed() { return new URLSearchParams(location.search).has("as_of"); }
  var busy = false, again = false;
  function refresh() {
    if (scrubbed()) return;
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Veritask-Live": "1" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html && !scrubbed()) swapIn(html); })
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

  // -- the log viewer -------------------------------------------------------------------------
  // The server sends a page of numbered lines; this follows a growing log at the bottom (until
  // you scroll up), marks the search's matches and steps through them, and keeps a line's link
  // on the page. Log text is only ever added as text nodes.
  var view = document.getElementById("log-view");
  if (view) logViewer(view);

  function logViewer(view) {
    var lines = document.getElementById("log-lines");
    var query = (view.dataset.query || "").toLowerCase();
    var resume = document.getElementById("log-resume");
    var paused = document.getElementById("log-paused");
    var following = document.getElementById("log-following");
    var status = document.getElementById("hit-status");
    var previous = document.getElementById("hit-prev"), next = document.getElementById("hit-next");
    var previousPage = document.getElementById("hit-prev-page");
    var nextPage = document.getElementById("hit-next-page");
    var follows = !!view.dataset.follow, hitCount = 0, current = -1, MAX_LINES = 5000;

    function atBottom() { return view.scrollTop + view.clientHeight >= view.scrollHeight - 4; }
    function toBottom() { view.scrollTop = view.scrollHeight; }
    function setFollowing(on) {
      follows = on && !!view.dataset.follow;
      if (resume) resume.hidden = follows || !view.dataset.follow;
      if (paused) paused.hidden = follows || !view.dataset.follow;
      if (following) following.hidden = !follows;
    }

    function mark(row) {
      var text = row.querySelector(".tx");
      if (!query || !text) return;
      var nodes = [], walker = document.createTreeWalker(text, NodeFilter.SHOW_TEXT), node;
      while ((node = walker.nextNode())) nodes.push(node);
      var whole = nodes.map(function (n) { return n.data; }).join("");
      var lower = whole.toLowerCase();
      if (lower.length !== whole.length) return;  // positions would not map back
      var found = [], at = 0, where;
      while ((where = lower.indexOf(query, at)) !== -1) {
        found.push([where, where + query.length, hitCount++]);
        at = where + query.length;
      }
      if (!found.length) return;
      var start = 0;
      nodes.forEach(function (textNode) {
        var end = start + textNode.data.length, pieces = document.createDocumentFragment();
        var cursor = start, touched = false;
        found.forEach(function (hit) {
          var from = Math.max(hit[0], start), to = Math.min(hit[1], end);
          if (from >= to) return;
          touched = true;
          if (from > cursor) pieces.appendChild(document.createTextNode(textNode.data.slice(cursor - start, from - start)));
          var highlight = document.createElement("mark");
          highlight.textContent = textNode.data.slice(from - start, to - start);
          highlight.dataset.hit = String(hit[2]);
          if (from === hit[0]) highlight.dataset.first = "yes";
          pieces.appendChild(highlight);
          cursor = to;
        });
        if (touched) {
          if (cursor < end) pieces.appendChild(document.createTextNode(textNode.data.slice(cursor - start)));
          textNode.parentNode.replaceChild(pieces, textNode);
        }
        start = end;
      });
    }

    function hits() { return Array.prototype.slice.call(view.querySelectorAll("mark[data-first]")); }
    function show(index) {
      var all = hits();
      if (!all.length) return;
      current = index;
      view.querySelectorAll("mark.current").forEach(function (m) { m.classList.remove("current"); });
      var hit = all[index].dataset.hit;
      view.querySelectorAll("mark[data-hit='" + hit + "']").forEach(function (m) { m.classList.add("current"); });
      setFollowing(false);
      all[index].scrollIntoView({ block: "center" });
      if (status) status.textContent = view.dataset.hitStatus.replace("{n}", String(index + 1)).replace("{total}", String(all.length));
    }
    function step(by) {
      var all = hits(), wanted = current + by;
      if (wanted >= 0 && wanted < all.length) { show(wanted); return; }
      var beyond = by > 0 ? nextPage : previousPage;
      if (beyond) location.href = beyond.href;
    }
    if (previous && next) {
      previous.addEventListener("click", function () { step(current < 0 ? hits().length : -1); });
      next.addEventListener("click", function () { step(1); });
    }

    function target(line) {
      view.querySelectorAll(".line.target").forEach(function (row) { row.classList.remove("target"); });
      line.classList.add("target");
      setFollowing(false);
      line.scrollIntoView({ block: "center" });
    }
    lines.addEventListener("click", function (event) {
      var link = event.target.closest && event.target.closest("a.ln");
      if (!link) return;
      var line = document.getElementById(link.hash.slice(1));
      if (!line) return;
      event.preventDefault();
      history.replaceState(null, "", link.href);
      target(line);
    });

    function addLine(item) {
      var row = document.createElement("div"), link = document.createElement("a");
      var text = document.createElement("span");
      row.className = "line";
      row.id = "L" + item.n;
      link.className = "ln";
      link.href = view.dataset.lineHref + "&line=" + item.n + "#L" + item.n;
      link.textContent = String(item.n);
      text.className = "tx";
      item.s.forEach(function (part) {
        var node = document.createTextNode(part[1]);  // text, never markup
        if (!part[0]) { text.appendChild(node); return; }
        var span = document.createElement("span");
        span.className = part[0];  // the server's fixed class names (ansi.py)
        span.appendChild(node);
        text.appendChild(span);
      });
      row.appendChild(link);
      row.appendChild(text);
      if (item.cut) {
        var cut = document.createElement("span");
        cut.className = "cut";
        cut.textContent = view.dataset.cutText;
        row.appendChild(cut);
      }
      var old = document.getElementById(row.id);
      if (old && old.parentNode === lines) lines.replaceChild(row, old); else lines.appendChild(row);
      mark(row);
    }

    function poll() {
      if (!view.dataset.follow) return;
      var soon = false;
      var url = view.dataset.follow + "&offset=" + encodeURIComponent(view.dataset.offset) +
        "&line=" + encodeURIComponent(view.dataset.line);
      fetch(url, { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (chunk) {
          if (!chunk) return;
          if (chunk.lines.length) {
            var empty = document.getElementById("log-empty");
            if (empty) empty.remove();
            // Far behind, the server skipped to the tail: the lines shown no longer lead
            // to these (the pages have them).
            if (chunk.skipped) while (lines.firstChild) lines.removeChild(lines.firstChild);
            chunk.lines.forEach(addLine);
            // While it follows, the page keeps the newest lines only: a log that grows for
            // hours never makes it heavy (the pages have the older ones). A reader who
            // scrolled up keeps their place.
            while (follows && lines.children.length > MAX_LINES) lines.removeChild(lines.firstElementChild);
            if (follows) toBottom();
            if (previous && hits().length) { previous.hidden = false; next.hidden = false; }
          }
          soon = chunk.more;
          view.dataset.offset = String(chunk.next_offset);
          view.dataset.line = String(chunk.next_line);
          if (chunk.ended && !chunk.lines.length) {
            delete view.dataset.follow;
            var done = document.getElementById("log-done");
            if (done) done.hidden = false;
            setFollowing(false);
          }
        })
        .catch(function () { /* the next poll tries again */ })
        .finally(function () { if (view.dataset.follow) setTimeout(poll, soon ? 50 : 1000); });
    }

    lines.querySelectorAll(".line").forEach(mark);
    if (previous && (hits().length || previousPage || nextPage)) { previous.hidden = false; next.hidden = false; }
    view.addEventListener("scroll", function () { if (view.dataset.follow) setFollowing(atBottom()); });
    if (resume) resume.addEventListener("click", function () { setFollowing(true); toBottom(); view.focus(); });
    var wanted = /^#L\d+$/.test(location.hash) && document.getElementById(location.hash.slice(1));
    if (wanted) {
      target(wanted);
      var first = wanted.querySelector("mark[data-first]");
      if (first) show(hits().indexOf(first));
    } else if (view.dataset.last === "yes") {
      toBottom();
      setFollowing(true);
    }
    if (view.dataset.follow) setTimeout(poll, 1000);
  }

  // -- the task graph zooms and pans ------------------------------------------------------------
  // Without the script the graph is drawn at its own size in a box that scrolls. The script
  // zooms by resizing the SVG (its viewBox keeps the drawing's coordinates), so the box's own
  // scrolling does the panning: scrollbars, a touchpad, and Tab to a box out of sight go on
  // working. A plain wheel scrolls the page as everywhere; Ctrl + wheel (a touchpad's pinch
  // too) zooms around the pointer.
  document.querySelectorAll("[data-graph]").forEach(zoomable);

  function zoomable(holder) {
    var view = holder.querySelector(".graph-view");
    var tools = holder.querySelector(".graph-tools");
    var level = holder.querySelector(".zoom-level");
    // Below three quarters the 12 px labels are too small to read: a graph wider than its
    // box opens no smaller than that, with scrollbars, its first tasks in sight. Fit shows
    // the whole graph whatever the scale, and zooming out goes as far as fit or half size.
    var STEP = 1.25, MOST = 4, READABLE = 0.75, HALF = 0.5;
    var scale = 1, pending = null;

    function drawing() { return view.querySelector("svg.dag"); }
    function drawn(svg) { var box = svg.viewBox.baseVal; return { width: box.width, height: box.height }; }
    function resize(svg) {
      var size = drawn(svg);
      svg.setAttribute("width", String(size.width * scale));
      svg.setAttribute("height", String(size.height * scale));
      view.dataset.scale = String(scale);
      level.textContent = Math.round(scale * 100) + "%";
    }
    function fitting() {
      var svg = drawing(), size = drawn(svg);
      var tallest = parseFloat(getComputedStyle(view).maxHeight) || view.clientHeight;
      return Math.min(1, (view.clientWidth - 1) / size.width, (tallest - 1) / size.height);
    }
    // The point of the box at (x, y) (from its top left corner) stays where it is.
    function zoomTo(wanted, x, y) {
      var svg = drawing();
      if (!svg) return;
      var next = Math.max(Math.min(HALF, fitting()), Math.min(MOST, wanted));
      if (x === undefined) { x = view.clientWidth / 2; y = view.clientHeight / 2; }
      var left = (view.scrollLeft + x) / scale, top = (view.scrollTop + y) / scale;
      scale = next;
      resize(svg);
      view.scrollLeft = left * scale - x;
      view.scrollTop = top * scale - y;
    }
    function fit() { zoomTo(fitting()); view.scrollLeft = 0; view.scrollTop = 0; }
    function pan(dx, dy) { view.scrollLeft += dx; view.scrollTop += dy; }
    function within(event) {
      var box = view.getBoundingClientRect();
      return { x: event.clientX - box.left - view.clientLeft, y: event.clientY - box.top - view.clientTop };
    }

    tools.hidden = false;
    view.classList.add("zoomable");
    var first = drawing();
    if (!first) return;
    scale = Math.min(1, Math.max(READABLE, (view.clientWidth - 1) / drawn(first).width));
    resize(first);

    tools.addEventListener("click", function (event) {
      var button = event.target.closest && event.target.closest("button[data-zoom]");
      if (!button) return;
      var how = button.dataset.zoom;
      if (how === "fit") fit(); else zoomTo(how === "in" ? scale * STEP : scale / STEP);
    });

    view.addEventListener("keydown", function (event) {
      if (event.ctrlKey || event.metaKey || event.altKey) return;  // the browser's own zoom
      var stepX = Math.max(40, view.clientWidth / 8), stepY = Math.max(40, view.clientHeight / 8);
      switch (event.key) {
        case "ArrowLeft": pan(-stepX, 0); break;
        case "ArrowRight": pan(stepX, 0); break;
        case "ArrowUp": pan(0, -stepY); break;
        case "ArrowDown": pan(0, stepY); break;
        case "+": case "=": zoomTo(scale * STEP); break;
        case "-": case "_": zoomTo(scale / STEP); break;
        case "0": fit(); break;
        default: return;
      }
      event.preventDefault();
    });

    // Many wheel events come in one frame: one resize per frame keeps a 1,000-box graph smooth.
    view.addEventListener("wheel", function (event) {
      if (!event.ctrlKey && !event.metaKey) return;
      event.preventDefault();
      var lines = event.deltaMode === 1 ? 16 : event.deltaMode === 2 ? view.clientHeight : 1;
      var factor = Math.exp(-event.deltaY * lines / 300), at = within(event);
      if (pending) { pending.factor *= factor; pending.x = at.x; pending.y = at.y; return; }
      pending = { factor: factor, x: at.x, y: at.y };
      requestAnimationFrame(function () {
        var wanted = pending;
        pending = null;
        zoomTo(scale * wanted.factor, wanted.x, wanted.y);
      });
    }, { passive: false });

    // A drag pans; a click that did not move follows its link. Touch pans natively.
    var drag = null, dragged = false;
    view.addEventListener("pointerdown", function (event) {
      if (event.button !== 0 || event.pointerType === "touch") return;
      var at = within(event);
      if (at.x >= view.clientWidth || at.y >= view.clientHeight) return;  // a scrollbar
      drag = { id: event.pointerId, x: event.clientX, y: event.clientY, left: view.scrollLeft, top: view.scrollTop };
      dragged = false;
    });
    view.addEventListener("pointermove", function (event) {
      if (!drag || event.pointerId !== drag.id) return;
      var dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (!dragged && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!dragged) {
        dragged = true;
        view.setPointerCapture(event.pointerId);
        view.classList.add("dragging");
        var selection = window.getSelection();
        if (selection) selection.removeAllRanges();
      }
      view.scrollLeft = drag.left - dx;
      view.scrollTop = drag.top - dy;
    });
    function drop() { drag = null; view.classList.remove("dragging"); }
    view.addEventListener("pointerup", drop);
    view.addEventListener("pointercancel", drop);
    view.addEventListener("click", function (event) {
      if (!dragged) return;
      dragged = false;
      event.preventDefault();
      event.stopPropagation();
    }, true);
    view.addEventListener("dragstart", function (event) { event.preventDefault(); });

    // A live update brings a new drawing at its own size: it keeps the reader's zoom.
    document.addEventListener("veritask:refreshed", function () {
      var svg = drawing();
      if (svg) resize(svg);
    });
  }

  // -- the run's time scrubber ------------------------------------------------------------------
  // Without the script the scrubber is a form and links (?as_of=T renders the run as it was
  // known at T). The script shows the slider, and the form, the slider, the step links and
  // "back to live" fetch the page as of their instant and swap in its live regions, without
  // a reload; the address follows (history.replaceState), so live updates stay paused while
  // it names an instant and a reload shows the same instant.
  var scrubber = document.getElementById("scrubber");
  if (scrubber) scrub(scrubber);

  function scrub(holder) {
    var slider = holder.querySelector(".scrub-slider");
    var range = document.getElementById("scrub-range");
    var form = document.getElementById("scrub-form");
    var field = document.getElementById("scrub-as-of");
    var start = Date.parse(holder.dataset.start);
    var wanted = 0, timer = null;

    function address(asOf) {
      var url = new URL(location.href);
      url.hash = "";
      if (asOf === null) url.searchParams.delete("as_of"); else url.searchParams.set("as_of", asOf);
      return url;
    }
    // The latest asked instant wins: an older answer arriving late is dropped.
    function go(asOf) {
      var asked = ++wanted, url = address(asOf);
      holder.setAttribute("aria-busy", "true");
      fetch(url.href, { credentials: "same-origin", headers: { "X-Veritask-Live": "1" } })
        .then(function (response) { return response.text().then(function (html) { return { ok: response.ok || response.status === 422, html: html }; }); })
        .then(function (answer) {
          if (asked !== wanted || !answer.ok) return;
          // A refused time leaves the page live, with the problem named.
          var refused = answer.html.indexOf('id="scrub-error"') !== -1;
          history.replaceState(null, "", refused ? address(null).href : url.href);
          swapIn(answer.html);
        })
        .catch(function () { /* the reader asks again */ })
        .finally(function () { if (asked === wanted) holder.removeAttribute("aria-busy"); });
    }
    // The slider and the form follow the instant the page shows (after a step or live news).
    function follow() {
      var state = document.getElementById("scrub-state");
      if (!state) return;
      range.max = state.dataset.span;
      if (document.activeElement !== range) range.value = state.dataset.offset;
      range.setAttribute("aria-valuetext", state.dataset.moment);
      if (document.activeElement !== field && !document.getElementById("scrub-error")) {
        field.value = state.dataset.typed || field.value;
      }
    }
    function instantOf(offset) { return new Date(start + Number(offset) * 1000).toISOString(); }

    slider.hidden = false;
    range.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { go(instantOf(range.value)); }, 120);
    });
    range.addEventListener("change", function () { clearTimeout(timer); go(instantOf(range.value)); });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      go(field.value.trim() ? field.value.trim() : null);
    });
    holder.addEventListener("click", function (event) {
      var link = event.target.closest && event.target.closest("a[data-scrub-to]");
      if (!link || event.ctrlKey || event.metaKey || event.shiftKey) return;
      event.preventDefault();
      go(link.dataset.scrubTo || null);
    });
    document.addEventListener("veritask:refreshed", follow);
    follow();
  }

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
