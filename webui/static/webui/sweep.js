// The sweep page: draw the charts the server sent as data; while scenarios are pending, poll the sweep's JSON,
// move the progress bar and each row's status, and reload once every scenario is planned (charts and best).
(function () {
  "use strict";

  function drawCharts() {
    var holder = document.getElementById("figures-data");
    if (!holder || typeof Plotly === "undefined") return;
    var figures = JSON.parse(holder.textContent);
    document.querySelectorAll("[data-figure]").forEach(function (div) {
      var fig = figures[div.dataset.figure];
      if (fig) Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
    });
  }

  function showProgress(done, total) {
    var bar = document.getElementById("sweep-bar");
    bar.style.width = (total ? Math.round(100 * done / total) : 100) + "%";
    document.getElementById("sweep-done").textContent = done;
  }

  function showRows(scenarios) {
    scenarios.forEach(function (row) {
      var tr = document.querySelector('tr[data-plan="' + row.plan + '"]');
      if (!tr) return;
      var status = tr.querySelector('[data-cell="status"]');
      status.textContent = row.status;
      status.className = "badge status-" + row.status;
      if (row.layout) tr.querySelector('[data-cell="layout"]').textContent = row.layout;
      if (row.mfu !== null) tr.querySelector('[data-cell="mfu"]').textContent = (100 * row.mfu).toFixed(1) + "%";
    });
  }

  function watchProgress() {
    var box = document.getElementById("sweep-progress");
    var bar = document.getElementById("sweep-bar");
    showProgress(parseInt(bar.dataset.done, 10), parseInt(bar.dataset.total, 10));
    if (box.dataset.status === "done") return;
    var badge = document.getElementById("sweep-status");
    var delay = 700;
    function poll() {
      fetch(box.dataset.statusUrl, {headers: {"Accept": "application/json"}})
        .then(function (r) { return r.json(); })
        .then(function (sweep) {
          showProgress(sweep.done, sweep.total);
          showRows(sweep.scenarios);
          badge.textContent = sweep.status;
          badge.className = "badge status-" + sweep.status;
          if (sweep.status === "done") { window.location.reload(); return; }
          delay = Math.min(delay * 1.2, 3000);
          setTimeout(poll, delay);
        })
        .catch(function () { setTimeout(poll, 3000); });
    }
    setTimeout(poll, delay);
  }

  drawCharts();
  watchProgress();
})();
