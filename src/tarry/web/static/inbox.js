// tarry inbox: the server says when something changed (Server-Sent Events); new questions then appear
// without a reload, a card being typed in is never touched, and a conversation shows its new turns.
(function () {
  "use strict";
  var PAUSED_AFTER = 3000;

  function cardOf(element) {
    return element && element.closest ? element.closest("[data-question]") : null;
  }

  document.addEventListener("input", function (event) {
    var card = cardOf(event.target);
    if (card) card.setAttribute("data-dirty", "true");
  });

  function busy(card) {
    return card.hasAttribute("data-dirty") || card.contains(document.activeElement);
  }

  function markGone(card) {
    if (card.classList.contains("gone")) return;
    card.classList.add("gone");
    var note = document.createElement("p");
    note.className = "gone-note";
    note.setAttribute("role", "status");
    note.textContent = "This question was answered elsewhere or lapsed. Sending yours will tell you which.";
    var header = card.querySelector("header");
    if (header) header.appendChild(note);
  }

  function checkLapses() {
    var now = Date.now();
    document.querySelectorAll("[data-lapses]").forEach(function (line) {
      var card = cardOf(line);
      if (!card || card.classList.contains("lapsed")) return;
      if (Date.parse(line.getAttribute("data-lapses")) <= now) {
        card.classList.add("lapsed");
        var note = card.querySelector(".lapsed-note");
        if (note) note.hidden = false;
      }
    });
  }

  function status(text) {
    document.getElementById("live-status").textContent = text;
  }

  function merge(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    var freshCards = fresh.getElementById("cards");
    var cards = document.getElementById("cards");
    if (!freshCards || !cards) return;
    var wanted = {};
    Array.prototype.forEach.call(freshCards.children, function (item) { wanted[item.id] = true; });
    Array.prototype.slice.call(cards.children).forEach(function (card) {
      if (wanted[card.id]) return;
      if (busy(card)) markGone(card);
      else card.remove();
    });
    var previous = null;
    var added = 0;
    Array.prototype.forEach.call(freshCards.children, function (item) {
      var present = document.getElementById(item.id);
      if (present) { previous = present; return; }
      var node = document.importNode(item, true);
      if (previous) previous.after(node); else cards.prepend(node);
      previous = node;
      added += 1;
    });
    var tasks = document.getElementById("tasks");
    var freshTasks = fresh.getElementById("tasks");
    if (tasks && freshTasks) tasks.replaceWith(document.importNode(freshTasks, true));
    var more = document.getElementById("more");
    var freshMore = fresh.getElementById("more");
    if (more && freshMore) more.replaceWith(document.importNode(freshMore, true));
    var open = cards.querySelectorAll("[data-question]:not(.gone)").length;
    var beyond = document.getElementById("more-questions") ? "+" : "";
    document.getElementById("question-count").textContent = String(open) + beyond;
    document.getElementById("no-questions").hidden = cards.children.length > 0;
    if (added) status(added === 1 ? "1 new question arrived." : added + " new questions arrived.");
    checkLapses();
  }

  function replace(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("conversation");
    var shown = document.getElementById("conversation");
    if (fresh && shown) shown.replaceWith(document.importNode(fresh, true));
  }

  function refresh() {
    var live = document.getElementById("live");
    if (!live) return;
    fetch(live.getAttribute("data-refresh"), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error(String(response.status));
        return response.text();
      })
      .then(function (html) {
        if (live.hasAttribute("data-replace")) replace(html); else merge(html);
        document.body.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { status("Live updates paused: the inbox did not answer. Retrying."); });
  }

  function listen() {
    var live = document.getElementById("live");
    if (!live || !window.EventSource) return;
    var source = new EventSource(live.getAttribute("data-events"));
    var paused = null;
    source.addEventListener("change", refresh);
    source.addEventListener("open", function () {
      if (paused) window.clearTimeout(paused);
      paused = null;
      document.body.setAttribute("data-listening", "true");
    });
    source.addEventListener("error", function () {
      // Each stream ends after a while and the browser reconnects: say nothing unless that fails.
      if (paused) return;
      paused = window.setTimeout(function () {
        status("Live updates paused: the inbox did not answer. Retrying.");
      }, PAUSED_AFTER);
    });
  }

  var notice = document.getElementById("notice");
  if (notice) notice.focus();
  checkLapses();
  window.setInterval(checkLapses, 1000);
  listen();
})();
