// The sweep page (its charts: charts.js): while scenarios are pending, poll the sweep's JSON,
// move the progress bar and each row's status, and reload once every scenario is planned (charts and best).
(function () {
  "use strict";


  function showProgress(done, total) {
    var bar = document.getElementById("sweep-bar");
    bar.style.width = (total ? Math.round(100 * done / total) : 100) + "%";
    document.getElementById("sweep-done").textContent = done.toLocaleString("en-US");  // as the page: 1,024
  }

  // Three significant digits, thousands separated, as the server's `number` filter writes them.
  function number(x) {
    if (x === null || x === undefined) return "–";
    return Math.abs(x) >= 1000 ? Math.round(x).toLocaleString("en-US") : String(Number(x.toPrecision(3)));
  }

  // A duration as the server's `duration` filter writes it: 3.2 s, 10.9 min, 6.3 h, 41.2 days, 2.1 years; in the
  // unit the rounded figure stays under (0.99996 s is "1.000 s", not "1000 ms").
  var DURATIONS = [[1, "ms", 1e-3], [120, "s", 1], [7200, "min", 60], [172800, "h", 3600],
                   [2 * 365 * 86400, "days", 86400], [Infinity, "years", 365 * 86400]];
  function duration(seconds, digits, zeros) {
    if (seconds === null || seconds === undefined) return "–";
    digits = digits || 3;
    function shown(x) {
      if (!zeros) return String(Number(x.toPrecision(digits)));
      if (Math.abs(x) >= Math.pow(10, digits)) return Math.round(x).toLocaleString("en-US");
      return x.toPrecision(digits);
    }
    for (var i = 0; i < DURATIONS.length; i++) {
      var text = shown(seconds / DURATIONS[i][2]);
      if (Number(text.replace(/,/g, "")) < DURATIONS[i][0] / DURATIONS[i][2]) return text + " " + DURATIONS[i][1];
    }
    return "–";
  }

  // A step time as the server's `step_time` filter writes it: four significant digits, zeros kept.
  function stepTime(seconds) { return duration(seconds, 4, true); }

  // For the browser test that holds these to the server's filters.
  window.sweepFormat = {duration: duration, number: number, stepTime: stepTime};

  var CELLS = {
    layout: function (row) {  // as the page's template words it
      if (row.layout) return row.layout;
      if (row.status === "done") return "no feasible layout (its plan says why)";
      return row.status === "failed" ? "the search failed (see its plan)" : "";
    },
    step_time_s: function (row) { return stepTime(row.step_time_s); },
    tokens_per_s: function (row) { return number(row.tokens_per_s); },
    mfu: function (row) { return row.mfu === null ? "–" : (100 * row.mfu).toFixed(1) + "%"; },
    time_to_train_days: function (row) {
      return row.time_to_train_days === null ? "–" : number(row.time_to_train_days) + " days";
    },
    gpu_hours: function (row) { return number(row.gpu_hours); },
    cost: function (row) { return number(row.cost); },
    meets_goal: function (row) {  // with the reason a scenario in time still misses, as the template says it
      if (row.meets_goal === null) return "–";
      return row.meets_goal ? "yes" : "no" + (row.goal_note ? ": " + row.goal_note : "");
    }
  };

  function showRows(scenarios) {
    scenarios.forEach(function (row) {
      var tr = document.querySelector('tr[data-plan="' + row.plan + '"]');
      if (!tr) return;
      var status = tr.querySelector('[data-cell="status"]');
      status.textContent = row.status;
      status.className = "badge status-" + row.status;
      Object.keys(CELLS).forEach(function (name) {
        var cell = tr.querySelector('[data-cell="' + name + '"]');
        if (cell) cell.textContent = CELLS[name](row);
      });
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
          var broker = document.getElementById("sweep-broker");  // scenarios the task queue did not take yet
          broker.hidden = !sweep.waiting_for_broker;
          document.getElementById("sweep-broker-count").textContent = sweep.waiting_for_broker.toLocaleString("en-US");
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

  // Compare takes 2 to 4 plans (compare.MIN_PLANS, MAX_PLANS): a fifth box cannot be ticked, and the button waits
  // for the second. Without this script the server says the same on its own page.
  // The ticks are kept for the tab (sessionStorage): the page reloads itself once the last scenario is planned,
  // and the scenarios ticked while it ran were lost with it.
  function limitCompare() {
    var form = document.getElementById("compare-form");
    if (!form) return;
    var boxes = Array.prototype.slice.call(form.querySelectorAll("input[name=plans]"));
    var button = document.getElementById("compare-selected");
    var key = "compare-ticks:" + window.location.pathname;
    function update() {
      var ticked = boxes.filter(function (b) { return b.checked; });
      boxes.forEach(function (b) { b.disabled = !b.checked && ticked.length >= 4; });
      if (button) button.disabled = ticked.length < 2;
      try {
        sessionStorage.setItem(key, JSON.stringify(ticked.map(function (b) { return b.value; })));
      } catch (e) { /* storage off: the ticks last as long as the page */ }
    }
    function restore() {
      var kept = [];
      try { kept = JSON.parse(sessionStorage.getItem(key) || "[]"); } catch (e) { kept = []; }
      boxes.forEach(function (b) { if (kept.indexOf(b.value) >= 0) b.checked = true; });
      update();
    }
    boxes.forEach(function (b) { b.addEventListener("change", update); });
    window.addEventListener("pageshow", restore);
    restore();
  }

  limitCompare();
  watchProgress();
})();
