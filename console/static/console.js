// The console works without this script. It only keeps the inbox live: the
// console sends an "inbox" event when the pending asks changed, and the
// page fetches its lists again and adds the new asks and schedules and
// removes the decided ones, leaving the others (and anything typed into them) alone.
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
    ["inbox", "schedule"].forEach(function (name) {
      mergeList(next, name + "-list");
      var count = document.getElementById(name + "-count");
      var freshCount = next.getElementById(name + "-count");
      if (count && freshCount) { count.textContent = freshCount.textContent; }
    });
  }

  function mergeList(next, id) {
    var list = document.getElementById(id);
    var fresh = next.getElementById(id);
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
