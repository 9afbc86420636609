// The console works without this script. It only keeps the inbox live: the
// console sends an "inbox" event when the pending asks changed, and the
// page fetches its list again and adds the new asks and removes the
// answered ones, leaving the others (and anything typed into them) alone.
"use strict";
(function () {
  var box = document.getElementById("inbox");
  if (!box || !window.EventSource || !window.fetch) {
    return;
  }
  var seen = null;
  var busy = false;
  var again = false;

  function merge(html) {
    var next = new DOMParser().parseFromString(html, "text/html");
    var list = document.getElementById("inbox-list");
    var fresh = next.getElementById("inbox-list");
    if (!list || !fresh) {
      return;
    }
    var keep = {};
    Array.prototype.forEach.call(fresh.children, function (li) { keep[li.id] = true; });
    Array.prototype.slice.call(list.children).forEach(function (li) {
      if (!keep[li.id]) { li.remove(); }
    });
    var at = null;
    Array.prototype.slice.call(fresh.children).reverse().forEach(function (li) {
      var old = document.getElementById(li.id);
      if (old) { at = old; return; }
      var node = document.importNode(li, true);
      list.insertBefore(node, at);
      at = node;
    });
    var count = document.getElementById("inbox-count");
    var freshCount = next.getElementById("inbox-count");
    if (count && freshCount) { count.textContent = freshCount.textContent; }
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(box.dataset.list, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html) { merge(html); } })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  var events = new EventSource("/events");
  events.addEventListener("inbox", function (e) {
    if (seen !== null && seen !== e.data) { refresh(); }
    seen = e.data;
  });
})();
