// Odradek console: live updates without reloading.
//
// A page names its event stream in <body data-live="/events?view=...">. The server sends
// "patch" events, each {"id": ..., "html": ...}: the new rendering of one live region of
// the page, which replaces the element with that id. Forms, focus and scroll outside the
// region stay as they are. One connection per page; EventSource reconnects by itself.
(function () {
  "use strict";
  var status = null;
  var updates = 0;

  function say(text, state) {
    if (!status) return;
    status.textContent = text;
    status.setAttribute("data-state", state);
  }

  function clock() {
    var d = new Date();
    return d.toLocaleTimeString();
  }

  function patch(region) {
    var old = document.getElementById(region.id);
    if (!old) return;
    var holder = document.createElement("div");
    holder.innerHTML = region.html;
    var fresh = holder.firstElementChild;
    if (fresh && fresh.id === region.id) {
      old.replaceWith(fresh);
    }
  }

  function start() {
    status = document.getElementById("live-status");
    var url = document.body.getAttribute("data-live");
    if (!url || !window.EventSource) return;
    var source = new EventSource(url);
    say("connecting…", "connecting");
    source.addEventListener("open", function () {
      say("● live", "live");
    });
    source.addEventListener("patch", function (event) {
      var regions = JSON.parse(event.data);
      for (var i = 0; i < regions.length; i++) patch(regions[i]);
      updates += 1;
      document.body.setAttribute("data-updates", String(updates));
      say("● live, updated " + clock(), "live");
    });
    source.addEventListener("gone", function (event) {
      say("✖ " + event.data, "gone");
      source.close();
    });
    source.addEventListener("error", function () {
      say("○ reconnecting…", "reconnecting");
    });
    window.addEventListener("pagehide", function () {
      source.close();
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
