// Every page with charts: draw the Plotly figures the server sent as data (webui/charts.py and its siblings build
// them; the page passes them with json_script as #figures-data), one per element with a data-figure name.
//
// Plotly draws a title on one line and cuts it at the figure's edge; on a phone most titles were cut. So each
// title is broken into lines that fit the chart's width (measured in the title's own font) and hung from the top
// of the figure, the top margin grows to hold its lines, and both are done again when the window's width changes.
(function () {
  "use strict";
  var holder = document.getElementById("figures-data");
  if (!holder || typeof Plotly === "undefined") return;
  var figures = JSON.parse(holder.textContent);
  var LINE = 1.3;  // a title line's height, in font sizes
  var PAD = 12, GAP = 16;  // pixels above the title and between it and the plot
  var PLOTLY_FONT = "'Open Sans', verdana, arial, sans-serif";  // Plotly's default font family
  var canvas = document.createElement("canvas").getContext("2d");

  function textWidth(text, px) {
    canvas.font = px + "px " + PLOTLY_FONT;
    return canvas.measureText(text).width;
  }

  // One <br>-separated part of a title: plain text, or text in one <span style=...> (a smaller subtitle).
  function wrapPart(part, px, width) {
    var m = /^(<span[^>]*>)([\s\S]*)(<\/span>)$/.exec(part);
    var open = m ? m[1] : "", body = m ? m[2] : part, close = m ? m[3] : "";
    var size = /font-size:\s*(\d+)px/.exec(open);
    if (size) px = Number(size[1]);
    var lines = [], line = "";
    body.split(" ").forEach(function (word) {
      var next = line ? line + " " + word : word;
      if (line && textWidth(next, px) > width) {
        lines.push(line);
        line = word;
      } else {
        line = next;
      }
    });
    lines.push(line);
    return {text: lines.map(function (l) { return open + l + close; }).join("<br>"), lines: lines.length, px: px};
  }

  // The title `text` wrapped to `width` pixels, and its height in pixels.
  function wrapTitle(text, px, width) {
    var parts = text.split("<br>").map(function (part) { return wrapPart(part, px, width); });
    var height = parts.reduce(function (sum, p) { return sum + p.lines * p.px * LINE; }, 0);
    return {text: parts.map(function (p) { return p.text; }).join("<br>"), height: Math.ceil(height),
            first: parts[0].px, lines: parts.reduce(function (sum, p) { return sum + p.lines; }, 0)};
  }

  // The relayout that fits `layout`'s title to the div's width: the figure grows by what the margin gains.
  function fitted(div, layout) {
    var title = layout.title && layout.title.text;
    if (!title) return {};
    var px = (layout.title.font && layout.title.font.size) || 17;
    var wrapped = wrapTitle(title, px, Math.max(120, div.clientWidth - 24));
    var margin = (layout.margin && layout.margin.t) || 80;
    var top = Math.max(margin, PAD + wrapped.height + GAP);
    var height = (layout.height || 450) + top - margin;
    // Plotly hangs a one-line title from `y` (yanchor top) but puts a multi-line title's first baseline there,
    // whatever its yanchor (plotly.js issue #6472), so that one is a line lower.
    var y = 1 - (PAD + (wrapped.lines > 1 ? wrapped.first : 0)) / height;
    return {"title.text": wrapped.text, "title.yref": "container", "title.y": y, "title.yanchor": "top",
            "margin.t": top, height: height};
  }

  var drawn = [];
  document.querySelectorAll("[data-figure]").forEach(function (div) {
    var fig = figures[div.dataset.figure];
    if (!fig) return;
    var layout = JSON.parse(JSON.stringify(fig.layout));
    var fit = fitted(div, fig.layout);
    if (fit["title.text"]) {
      Object.assign(layout.title, {text: fit["title.text"], yref: "container", y: fit["title.y"], yanchor: "top"});
      layout.margin = Object.assign({}, layout.margin, {t: fit["margin.t"]});
      layout.height = fit.height;
    }
    Plotly.newPlot(div, fig.data, layout, {responsive: true, displaylogo: false});
    drawn.push({div: div, layout: fig.layout, width: div.clientWidth});
  });

  var pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      drawn.forEach(function (d) {
        if (d.div.clientWidth === d.width) return;
        d.width = d.div.clientWidth;
        var fit = fitted(d.div, d.layout);
        if (fit["title.text"]) Plotly.relayout(d.div, fit);
      });
    }, 150);
  });
})();
