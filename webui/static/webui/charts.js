// Every page with charts: draw the Plotly figures the server sent as data (webui/charts.py and its siblings build
// them; the page passes them with json_script as #figures-data), one per element with a data-figure name.
//
// Each figure is fitted to its chart's width before it is drawn, and again when the window's width changes:
// Plotly draws a title on one line and cuts it at the figure's edge (on a phone most titles were cut), so each
// title is broken into lines that fit (measured in the title's own font) and hung from the top of the figure, the
// top margin grows to hold its lines; long bar labels are shortened and cramped cell labels dropped (below).
(function () {
  "use strict";
  var holder = document.getElementById("figures-data");
  if (!holder || typeof Plotly === "undefined") return;
  var figures = JSON.parse(holder.textContent);
  var LINE = 1.3;  // a title line's height, in font sizes
  var PAD = 12, GAP = 16;  // pixels above the title and between it and the plot
  // Plotly's toolbar (top right, about 28 px high) lay over the title's first line on a phone, where the title
  // spans the width: on a chart narrower than NARROW_PX the title starts below it.
  var MODEBAR_PX = 30, NARROW_PX = 600;
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

  // `layout`'s title wrapped to `width`: the figure grows by what its top margin gains.
  function fitTitle(layout, width) {
    var title = layout.title && layout.title.text;
    if (!title) return;
    var px = (layout.title.font && layout.title.font.size) || 17;
    var wrapped = wrapTitle(title, px, Math.max(120, width - 24));
    var margin = (layout.margin && layout.margin.t) || 80;
    var pad = width < NARROW_PX ? PAD + MODEBAR_PX : PAD;
    var top = Math.max(margin, pad + wrapped.height + GAP);
    var height = (layout.height || 450) + top - margin;
    // Plotly hangs a one-line title from `y` (yanchor top) but puts a multi-line title's first baseline there,
    // whatever its yanchor (plotly.js issue #6472), so that one is a line lower.
    var y = 1 - (pad + (wrapped.lines > 1 ? wrapped.first : 0)) / height;
    Object.assign(layout.title, {text: wrapped.text, yref: "container", y: y, yanchor: "top"});
    layout.margin = Object.assign({}, layout.margin, {t: top});
    layout.height = height;
  }

  // Horizontal bars labelled by long category names (a plan's "#2 TP4 PP4 DP16 CP2 mb2 v10 SP ZeRO-1 PP inside DP"):
  // on a narrow screen the labels took the width and squeezed the bars to nothing, and automargin still cut them at
  // the left. Each label is shortened to 40% of the width, at a word where it can be ("#2 TP4 PP4 DP16…"); the
  // hover keeps the whole name.
  var TICK_PX = 12;  // Plotly's default tick label size
  // `label` cut to `width` at a word where it can be, keeping its start ("#2 TP4 PP4 DP16…") or, `fromStart`, its
  // end ("…style), precision fp8").
  function cut(label, width, fromStart) {
    if (textWidth(label, TICK_PX) <= width) return label;
    function marked(text) { return fromStart ? "…" + text : text + "…"; }
    var words = label.split(" ");
    while (words.length > 1 && textWidth(marked(words.join(" ")), TICK_PX) > width) {
      if (fromStart) words.shift(); else words.pop();
    }
    var text = words.join(" ");
    while (text.length > 1 && textWidth(marked(text), TICK_PX) > width) {
      text = fromStart ? text.slice(1) : text.slice(0, -1);
    }
    return marked(text);
  }
  function shorten(label, width) { return cut(label, width, false); }
  function shortenFromStart(label, width) { return cut(label, width, true); }

  // Both ends of a label, half the room each ("H100 SXM5…precision fp8").
  function shortenMiddle(label, width) {
    if (textWidth(label, TICK_PX) <= width) return label;
    var head = shorten(label, width / 2), tail = shortenFromStart(label, width / 2);
    return head + tail.slice(1);
  }

  // Each ", "-separated part shortened to its share of the room, from its start or from its end: a sweep's row
  // of four axes ("H100 SXM5 96GB HBM2e 500W, DGX H100, NDR InfiniBand fat tree, precision fp8") keeps a piece of
  // each ("…HBM2e 500W, …DGX H100, …fat tree, …ion fp8").
  function byParts(how) {
    return function (label, width) {
      if (textWidth(label, TICK_PX) <= width) return label;
      var parts = label.split(", ");
      var share = (width - textWidth(", ", TICK_PX) * (parts.length - 1)) / parts.length;
      return parts.map(function (part) { return how(part, share); }).join(", ");
    };
  }

  function distinct(values) {
    return values.filter(function (v, i) { return values.indexOf(v) === i; }).length;
  }

  function fitCategoryLabels(data, layout, width) {
    var bars = data.filter(function (t) {  // horizontal bars, and heatmap rows (a sweep's axis combinations)
      return ((t.type === "bar" && t.orientation === "h") || t.type === "heatmap") && t.y;
    });
    if (!bars.length || !layout.yaxis) return;
    var labels = bars[0].y.filter(function (y) { return typeof y === "string"; });
    var room = Math.max(80, 0.4 * width);
    // A bar's number ("#2 ", compare's and the plan page's) is kept whole and left out of the shortening: it told
    // every label apart, so "#1 Llama 3 70B on…" and "#2 Llama 3 70B on…" passed for distinct on a phone.
    var numbers = labels.map(function (label) { return (/^#\d+ /.exec(label) || [""])[0]; });
    var rests = labels.map(function (label, i) { return label.slice(numbers[i].length); });
    var numbered = Math.max.apply(null, numbers.map(function (n) { return textWidth(n, TICK_PX); }));
    // Labels alike in their first words (a sweep's rows that differ only in the precision, at the end) were
    // shortened alike: then their ends are kept, or both ends, or a piece of each part, whichever first keeps
    // them apart, in 40% of the width and then in 55%.
    var ways = [shorten, shortenFromStart, shortenMiddle, byParts(shortenFromStart), byParts(shorten)];
    var short = null;
    [room, Math.max(room, 0.55 * width)].some(function (space) {
      return ways.some(function (how) {
        var candidate = rests.map(function (rest) { return how(rest, space - numbered); });
        if (distinct(candidate) !== distinct(rests)) return false;
        short = candidate.map(function (rest, i) { return numbers[i] + rest; });
        return true;
      });
    });
    if (!short) short = labels.map(function (label) { return shorten(label, room); });
    if (short.every(function (label, i) { return label === labels[i]; })) return;
    Object.assign(layout.yaxis, {tickmode: "array", tickvals: labels, ticktext: short});
  }

  // A heatmap's cell labels ("TP3 DP15") are dropped where a cell is narrower than its label: on a phone the
  // placement map's labels ran into each other. The hover still names every cell.
  var CELL_PX = 10;
  function fitCellText(data, width) {
    data.forEach(function (t) {
      if (t.type !== "heatmap" || !t.text || !t.texttemplate) return;
      var columns = Math.max.apply(null, t.text.map(function (row) { return row.length; }));
      var longest = Math.max.apply(null, t.text.map(function (row) {
        return Math.max.apply(null, row.map(function (cell) { return textWidth(String(cell || ""), CELL_PX); }));
      }));
      var plot = width - 60 - 20 - 90 - 70;  // margins, colour bar, row labels
      if (longest + 4 > plot / columns) t.texttemplate = "";
    });
  }

  // A legend under the plot (webui/charts.py legend_below, sized for 3 entries a row) wraps into more rows on a
  // narrow chart, which then ran up over the x-axis title: the bottom margin grows to hold the rows this width
  // makes (entries packed in measured widths), and the legend is placed again below the axis title. An entry wider
  // than the chart (a sweep's "ideal scaling (RoCEv2 400 GbE (Llama 3 style), precision bf16)" at 375 px) ran
  // past its right edge: its name is shortened as the bar labels are, and its hover keeps the whole name.
  var LEGEND_GAP = 62, LEGEND_ROW = 21, LEGEND_SYMBOL = 46;  // px, as webui/charts.py
  function fitLegend(data, layout, width) {
    var legend = layout.legend;
    if (!legend || legend.orientation !== "h" || !(legend.y < 0) || !layout.margin) return;
    var names = [], room = width - 40;
    data.forEach(function (t) {
      if (!t.name || t.showlegend === false || t.type === "heatmap") return;
      // Every legend trace of webui/charts.py and sweep_charts.py names itself in its hovertemplate, or skips hover.
      if (textWidth(String(t.name), 12) + LEGEND_SYMBOL > room) t.name = shorten(String(t.name), room - LEGEND_SYMBOL);
      var name = t.legendgroup || t.name;
      if (names.indexOf(name) < 0) names.push(name);
    });
    var rows = 1, used = 0;
    names.forEach(function (name) {
      var entry = textWidth(String(name), 12) + LEGEND_SYMBOL;
      if (used && used + entry > room) { rows += 1; used = 0; }
      used += entry;
    });
    var margin = layout.margin, grow = Math.max(0, LEGEND_GAP + rows * LEGEND_ROW - margin.b);
    margin.b += grow;
    layout.height = (layout.height || 450) + grow;
    legend.y = -LEGEND_GAP / (layout.height - margin.t - margin.b);
  }

  // The figure as the server built it, fitted to the div's width.
  function fittedFigure(div, fig) {
    var data = JSON.parse(JSON.stringify(fig.data));
    var layout = JSON.parse(JSON.stringify(fig.layout));
    var width = div.clientWidth;
    fitTitle(layout, width);
    fitLegend(data, layout, width);
    fitCategoryLabels(data, layout, width);
    fitCellText(data, width);
    return {data: data, layout: layout};
  }

  // plotly.js 4 offers "Share chart..." by default (showSendToCloud), which uploads the figure's data to Plotly
  // Cloud (plotlyServerURL): plans stay on this server, so the button is off and the address is empty.
  // Box and lasso select do nothing on these charts (no chart acts on a selection), and each of Plotly's toolbar
  // buttons is a Tab stop: a keyboard had two more to pass on every scatter.
  var CONFIG = {responsive: true, displaylogo: false, showSendToCloud: false, showLink: false, plotlyServerURL: "",
                modeBarButtonsToRemove: ["select2d", "lasso2d"]};
  // Plotly's responsive resize fits a figure to its div, height too: the div holds the fitted height, or a
  // change of the window's height alone (a phone's address bar) shrank every chart to the CSS minimum.
  function draw(div, shown, again) {
    if (shown.layout.height) div.style.height = shown.layout.height + "px";
    (again ? Plotly.react : Plotly.newPlot)(div, shown.data, shown.layout, CONFIG).then(function () {
      clearAxisTitle(div);
    });
  }

  // What fitLegend estimates, measured once drawn: a legend still over the x-axis title (taller tick labels than
  // LEGEND_GAP allows) moves down by the overlap, and the figure grows by as much, its plot area unchanged.
  function clearAxisTitle(div) {
    var title = div.querySelector(".xtitle"), legend = div.querySelector(".legend");
    var layout = div.layout, size = div._fullLayout && div._fullLayout._size;
    if (!title || !legend || !layout.legend || !(layout.legend.y < 0) || !size) return;  // legends below only
    var overlap = Math.ceil(title.getBoundingClientRect().bottom + 4 - legend.getBoundingClientRect().top);
    if (overlap <= 0) return;
    // The layout as drawn, changed and drawn again (Plotly.relayout of a height also fixes the width, which then
    // stopped following the window).
    var changed = Object.assign({}, layout, {
      height: div._fullLayout.height + overlap,
      margin: Object.assign({}, layout.margin, {b: size.b + overlap}),
      legend: Object.assign({}, layout.legend, {y: layout.legend.y - overlap / size.h})});
    div.style.height = changed.height + "px";
    Plotly.react(div, div.data, changed, CONFIG);
  }

  var drawn = [];
  document.querySelectorAll("[data-figure]").forEach(function (div) {
    var fig = figures[div.dataset.figure];
    if (!fig) return;
    draw(div, fittedFigure(div, fig), false);
    drawn.push({div: div, fig: fig, width: div.clientWidth});
  });

  var pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      drawn.forEach(function (d) {
        if (d.div.clientWidth === d.width) return;
        d.width = d.div.clientWidth;
        draw(d.div, fittedFigure(d.div, d.fig), true);
      });
    }, 150);
  });
})();
