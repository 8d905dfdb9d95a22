/* awa-django dashboard: refresh the history fragment (charts, kinds) every few seconds
   without reloading the page. Nothing is fetched but the admin's own fragment URL. */
(function () {
  "use strict";
  function start() {
    var box = document.getElementById("awa-history");
    if (!box) { return; }
    var url = box.getAttribute("data-url");
    var every = Math.max(1, parseInt(box.getAttribute("data-refresh"), 10) || 5) * 1000;
    var range = new URLSearchParams(window.location.search).get("range") || "hour";
    function refresh() {
      fetch(url + "?range=" + encodeURIComponent(range), {credentials: "same-origin"})
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          if (html !== null) {
            box.innerHTML = html;
            box.setAttribute("data-refreshed", String(Date.now()));
          }
        })
        .catch(function () { /* the next tick tries again */ });
    }
    window.setInterval(refresh, every);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
