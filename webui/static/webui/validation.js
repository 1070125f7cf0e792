// The validation page: draw the charts the server sent as data (webui/validation_charts.py).
(function () {
  "use strict";
  var holder = document.getElementById("figures-data");
  if (!holder || typeof Plotly === "undefined") return;
  var figures = JSON.parse(holder.textContent);
  document.querySelectorAll("[data-figure]").forEach(function (div) {
    var fig = figures[div.dataset.figure];
    if (fig) Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
  });
})();
