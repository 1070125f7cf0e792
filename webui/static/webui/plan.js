// The plan page (its charts: charts.js): while the plan is queued or running,
// poll its status and reload once it is done or failed (no blank page, no manual refresh).
(function () {
  "use strict";


  function watchProgress() {
    var box = document.getElementById("plan-progress");
    if (!box) return;
    var text = document.getElementById("progress-text");
    var elapsed = document.getElementById("progress-elapsed");
    var badge = document.getElementById("plan-status");
    var started = Date.now() - 1000 * parseFloat(elapsed.textContent || "0");
    var delay = 700;

    setInterval(function () {
      var seconds = Math.round((Date.now() - started) / 1000);
      elapsed.textContent = seconds;
      if (seconds > 30) document.getElementById("progress-slow").hidden = false;
    }, 1000);

    function poll() {
      fetch(box.dataset.statusUrl, {headers: {"Accept": "application/json"}})
        .then(function (r) { return r.json(); })
        .then(function (plan) {
          if (plan.status === "done" || plan.status === "failed") { window.location.reload(); return; }
          // A search cut off (its worker died) goes back to the queue: say so as it happens, not on a reload.
          if (plan.cut_off) document.getElementById("progress-restarted").hidden = false;
          badge.textContent = plan.status;
          badge.className = "badge status-" + plan.status;
          if (plan.status === "running") text.textContent = "Searching the layouts…";
          else if (plan.waiting_for_broker) text.textContent = "Saved, waiting for the task queue: it did not " +
            "answer when you asked. The plan will be sent to a worker as soon as it is back; nothing is lost.";
          else text.textContent = "Queued" + (plan.queue_position ? " behind " + plan.queue_position +
            " other plan" + (plan.queue_position === 1 ? "" : "s") : "") + ": waiting for a worker to pick it up.";
          delay = Math.min(delay * 1.3, 3000);
          setTimeout(poll, delay);
        })
        .catch(function () { setTimeout(poll, 3000); });
    }
    setTimeout(poll, delay);
  }

  watchProgress();
})();
