// Every page with charts: draw the Plotly figures the server sent as data (webui/charts.py and its siblings build
// them; the page passes them with json_script as #figures-data), one per element with a data-figure name.
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
