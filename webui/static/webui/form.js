// The plan form: a catalog choice fills the fields below it; editing one of those switches to "custom".
// Hardware custom fields show only for "custom". Without this script the server applies the same rule:
// a catalog row's values are used as they are, and custom fields only when "custom" is chosen. A training stack
// fills its options' fields here; without the script the server leaves the settings of the stack the page showed
// (stack_shown) to the newly chosen one, keeping only what the person changed.
(function () {
  "use strict";
  var CUSTOM = "custom";
  var catalog = JSON.parse(document.getElementById("catalog-data").textContent);
  var selectors = {model_preset: "model", gpu: "gpu", node: "node", fabric: "fabric"};

  function inputsOf(prefix) {
    return document.querySelectorAll("[name^='" + prefix + "__']");
  }

  function fill(prefix, row) {
    inputsOf(prefix).forEach(function (input) {
      var key = input.name.slice(prefix.length + 2);
      var value = row[key];
      if (input.type === "checkbox") input.checked = value === true;
      else input.value = (value === undefined || value === null) ? "" : value;
    });
  }

  Object.keys(selectors).forEach(function (name) {
    var select = document.querySelector("[name='" + name + "']");
    if (!select) return;
    var section = selectors[name];
    var prefix = section === "model" ? "model" : name;
    var custom = select.closest("fieldset").querySelector(".custom-fields");

    // Hidden, not disabled: the server reads a hardware section's fields only under "custom", and a browser
    // going Back restores the values of enabled fields only. Disabled while hidden, a custom GPU's typed values
    // came back as the catalog row's that this script had filled in, under a dropdown restored to "custom".
    function showCustom() {
      if (custom) custom.hidden = select.value !== CUSTOM;
    }

    select.addEventListener("change", function () {
      var row = catalog[section][select.value];
      if (row) fill(prefix, row);
      showCustom();
    });

    inputsOf(prefix).forEach(function (input) {
      var ev = input.tagName === "SELECT" || input.type === "checkbox" ? "change" : "input";
      // The name stays the row's: the engine names the section "NAME (modified)" if its values end up differing
      // from the row's, and "NAME" if they are set back (planner/spec.py, _rename_if_changed), as for the API.
      input.addEventListener(ev, function () {
        if (select.value === CUSTOM) return;
        select.value = CUSTOM;
        showCustom();
      });
    });
    // The fields below a catalog choice hold that row's values, so that "custom" starts from them, and after
    // Back the browser restores the dropdown and the fields once this script has run (hence pageshow).
    // Editing a field switches to "custom", so a catalog choice never stands beside edited fields.
    function follow() {
      var chosen = catalog[section][select.value];
      if (chosen) fill(prefix, chosen);
      showCustom();
    }
    follow();
    window.addEventListener("pageshow", follow);
  });

  // The training stack fills the options it sets (and puts the others back to the engine's defaults), as the
  // server does for a request that names a stack and leaves them out; an option the person changed from what the
  // previous stack showed is kept, as the server keeps it without the script (forms._stack_filled). Choosing a
  // stack had put an attention kernel picked by hand back to the default.
  var stackData = JSON.parse(document.getElementById("stack-data").textContent);
  var stackSelect = document.querySelector("[name='training__framework']");
  function stackValue(stack, key) {
    var settings = stackData.stacks[stack] || {};
    return Object.prototype.hasOwnProperty.call(settings, key) ? settings[key] : stackData.defaults[key];
  }
  function shows(input, value) {
    if (input.type === "checkbox") return input.checked === (value === true);
    var typed = input.value, number = Number(typed);
    return typed === String(value) || (typed.trim() !== "" && typeof value === "number" && number === value);
  }
  if (stackSelect) {
    stackSelect.addEventListener("change", function () {
      var shown = document.querySelector("[name='stack_shown']");
      var before = shown ? shown.value : "";
      Object.keys(stackData.defaults).forEach(function (key) {
        var input = document.querySelector("[name='training__" + key + "']");
        if (!input || (before && !shows(input, stackValue(before, key)))) return;  // changed by the person
        var value = stackValue(stackSelect.value, key);
        if (input.type === "checkbox") input.checked = value === true;
        else input.value = value;
      });
      if (shown) shown.value = stackSelect.value;
    });
  }

  // After a refused submission, the keyboard starts at the first field with a message (the summary links each).
  var firstError = document.querySelector("#plan-form .has-error input, #plan-form .has-error select");
  if (firstError) firstError.focus();

  // Going Back restores pinned values into the closed "Pin the layout" section: it opens where a pin differs from
  // what the page was served with, so that a pin never goes with the next request unseen (as the server opens it,
  // and names the pins, for a copy of a plan with pins).
  function served(control) {
    if (control.tagName !== "SELECT") {
      return control.type === "checkbox" ? control.defaultChecked : control.defaultValue;
    }
    var marked = Array.prototype.filter.call(control.options, function (o) { return o.defaultSelected; });
    return (marked[0] || control.options[0] || {value: ""}).value;
  }
  function openPins() {
    var pins = document.querySelector("#fs-layout details");
    if (!pins) return;
    var changed = Array.prototype.some.call(pins.querySelectorAll("select, input"), function (control) {
      return (control.type === "checkbox" ? control.checked : control.value) !== served(control);
    });
    if (changed) pins.open = true;
  }
  window.addEventListener("pageshow", openPins);
  // The server's "Pinned: TP, Recompute." names the pins the page was served with: once a pin is changed it would
  // name the wrong ones, and the open section shows them all.
  var pinsNamed = document.querySelector("#fs-layout summary .pinned");
  if (pinsNamed) {
    ["input", "change"].forEach(function (ev) {
      document.getElementById("fs-layout").addEventListener(ev, function (e) {
        if (e.target.matches("select, input")) pinsNamed.hidden = true;
      });
    });
  }
})();
