"""The sweep form: a model preset, catalog items to compare (several of each), a list of GPU counts, precisions,
and an optional goal. It only assembles the document `POST /api/sweeps` takes; the checks are the sweep
service's (`sweeps.sweep_create`), whose field-named messages land next to the form field they are about.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

from django import forms

from planner import SpecError
from planner.catalog import Catalog
from planner.spec import PRECISIONS
from planner.stacks import FRAMEWORKS, GENERIC

from .forms import catalog_choice, show_gone_choices

DEFAULTS = {"model": "Llama 3 70B", "gpus": ["H100 SXM5 80GB"], "nodes": ["DGX H100"],
            "fabrics": ["NDR InfiniBand fat tree", "RoCEv2 400 GbE (Llama 3 style)"],
            "num_gpus": "256, 512, 1024, 2048, 4096, 8192", "precisions": ["bf16", "fp8"], "global_batch": "1024",
            "stacks": [GENERIC], "tokens": "15e12", "deadline_days": "90", "leave_out_invalid": True}
# The axis each multi-choice field varies, and the base field a single choice sets.
AXES = {"gpus": "cluster.gpu", "nodes": "cluster.node", "fabrics": "cluster.fabric",
        "precisions": "training.precision", "stacks": "training.framework", "num_gpus": "cluster.num_gpus"}
# Which form field shows a message about a sweep path (prefix match, most specific first).
FIELD_OF = (("cluster.num_gpus", "num_gpus"), ("cluster.gpu", "gpus"), ("cluster.node", "nodes"),
            ("cluster.fabric", "fabrics"), ("training.precision", "precisions"), ("training.framework", "stacks"),
            ("training.global_batch", "global_batch"), ("training.tokens", "tokens"), ("goal.tokens", "tokens"),
            ("goal.deadline_days", "deadline_days"), ("goal.budget", "budget"), ("model", "model"))


def sweep_initial(catalog: Catalog) -> dict[str, Any]:
    """DEFAULTS, with each catalog choice that an admin renamed or deleted replaced by the first row by name (as
    the plan form starts), so that an untouched form is still a complete sweep."""
    initial = dict(DEFAULTS)
    for name, section in (("model", "model"), ("gpus", "gpu"), ("nodes", "node"), ("fabrics", "fabric")):
        rows, wanted = catalog.get(section, {}), initial[name]
        if isinstance(wanted, str):
            initial[name] = catalog_choice(rows, wanted)
        else:  # the wanted rows still there, else (as catalog_choice) the first by name
            initial[name] = [n for n in wanted if n in rows] or [n for n in (catalog_choice(rows, wanted[0]),) if n]
    return initial


# A catalog row deleted or renamed in the admin while the form was open (forms.GONE_FROM_CATALOG; no "custom" here).
GONE_FROM_SWEEP_CATALOG = {"invalid_choice": "“%(value)s” is no longer in the catalog (deleted or renamed since this "
                                             "page was opened): choose again"}


# Digits in groups of three after the first, as thousands are written ("1,024", "16,384"): the page writes GPU
# counts so, and "1,024" had made a sweep of 1 and 24 GPUs.
THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+")


def _counts(token: str) -> list[str]:
    """The GPU counts one token of the list holds (commas at its ends dropped: "1,024,"): counts apart by bare
    commas ("64,96"), or one count written with thousands separators. A group after a comma that starts with 0
    ("1,024") is a thousands group, since no count is written "024". Refused, saying how to write either: a token
    both readings fit ("8,192", "64,128,256"), and one that mixes the two ("1,024,2,048", "1,0240"), whose
    pieces would otherwise be read as 1, 24, 2 and 48."""
    token = token.strip(",")
    groups = [group for group in token.split(",") if group]
    if THOUSANDS.fullmatch(token):
        if any(group.startswith("0") for group in groups[1:]):
            return [token.replace(",", "")]
        raise forms.ValidationError(
            f"“{token}” may be one GPU count ({token.replace(',', '')}) or {len(groups)} ({', '.join(groups)}): "
            f"write counts apart with a comma and a space, and thousands without commas")
    if any(len(group) > 1 and group.startswith("0") for group in groups):
        raise forms.ValidationError(
            f"“{token}” mixes thousands separators with commas between counts: write counts apart with a comma and "
            f"a space, and thousands without commas")
    return groups

class SweepForm(forms.Form):
    model = forms.ChoiceField(label="Model", help_text="A preset from the catalog.")
    gpus = forms.MultipleChoiceField(label="GPU types", help_text="Choose one or more (Ctrl/Cmd-click).")
    nodes = forms.MultipleChoiceField(label="Node types",
                                      help_text="Each GPU type is tried in each node type built with it (the node "
                                                "type's GPU types in the catalog); one that none of these is built "
                                                "with, in each, and a node built with none of the GPUs takes each.")
    fabrics = forms.MultipleChoiceField(label="Fabrics", help_text="Choose one or more.")
    # Room for every count a sweep may hold (1,024 scenarios): 400 characters cut a pasted list mid-number.
    num_gpus = forms.CharField(label="GPU counts", max_length=10_000,
                               help_text="A list, e.g. 256, 512, 1024: multiples of the node's GPUs (or a "
                                         "divisor, for part of one node).")
    precisions = forms.MultipleChoiceField(label="Precisions", choices=[(p, p) for p in PRECISIONS],
                                           widget=forms.CheckboxSelectMultiple)
    stacks = forms.MultipleChoiceField(
        label="Training stacks", choices=[(name, name) for name in FRAMEWORKS], required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="generic: each training option's default; the others fill them as that stack runs "
                  "(training.framework).")
    leave_out_invalid = forms.BooleanField(
        label="Leave out combinations that cannot run", required=False,
        help_text="Such as FP8 on a GPU without FP8 tensor cores, or a GPU in a node type not built with it, "
                  "where each value runs in another scenario: the sweep's page lists each with the reason. "
                  "Unticked, a combination that cannot run refuses the sweep, and every GPU goes in every node.")
    global_batch = forms.CharField(label="Global batch (sequences)", max_length=40)
    tokens = forms.CharField(label="Tokens to train", max_length=40, required=False,
                             help_text="e.g. 15e12; needed for time to train and for a goal.")
    deadline_days = forms.CharField(label="Deadline (days)", max_length=40, required=False,
                                    help_text="Goal: mark scenarios that train the tokens within this many days.")
    budget = forms.CharField(label="Budget (USD)", max_length=40, required=False,
                             help_text="Goal, optional: needs GPU prices in the catalog.")

    def __init__(self, *args: Any, catalog: Catalog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, section in (("model", "model"), ("gpus", "gpu"), ("nodes", "node"), ("fabrics", "fabric")):
            self.fields[name].choices = [(n, n) for n in sorted(catalog.get(section, {}))]
            self.fields[name].error_messages |= GONE_FROM_SWEEP_CATALOG
        show_gone_choices(self, ("model", "gpus", "nodes", "fabrics"))
        self.fields["gpus"].widget.attrs["size"] = 8
        self.fields["fabrics"].widget.attrs["size"] = 8
        self.catalog = catalog
        self.payload: dict[str, Any] | None = None

    def focus_first_error(self) -> None:
        """After a refused submission the keyboard starts at the first field with a message, as on the plan form
        (there by its script; here the page has none, so by `autofocus`)."""
        first = next((name for name in self.fields if name in self.errors), None)
        if first is not None:
            self.fields[first].widget.attrs["autofocus"] = True

    def clean_num_gpus(self) -> list[Any]:
        items = []
        for token in re.split(r"[\s;]+|,\s+", self.cleaned_data["num_gpus"]):
            items += _counts(token)
        if not items:
            raise forms.ValidationError("Give at least one GPU count.")
        counts = [_whole(item) for item in items]
        # Said here, as the sweep service would, so the other fields' messages still come in the same round
        twice = next((c for i, c in enumerate(counts) if c in counts[:i]), None)
        if twice is not None:
            raise forms.ValidationError(f"lists {twice} twice")
        return counts

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.errors:
            self.payload = self._payload(cleaned)
        return cleaned

    def _payload(self, c: dict[str, Any]) -> dict[str, Any]:
        training: dict[str, Any] = {"global_batch": c["global_batch"]}
        cluster: dict[str, Any] = {}
        vary: dict[str, list[Any]] = {}
        for name, path in AXES.items():
            values = c[name]
            if name == "stacks" and values in ([], [GENERIC]):
                continue  # none ticked is the engine's own defaults, as a request that names no stack
            if len(values) > 1 or name == "num_gpus":  # the GPU count is always an axis: the charts are over it
                vary[path] = values
            else:
                (training if path.startswith("training") else cluster)[path.split(".")[-1]] = values[0]
        data: dict[str, Any] = {"base": {"model": c["model"], "training": training, "cluster": cluster}, "vary": vary,
                                "leave_out_invalid": bool(c.get("leave_out_invalid"))}
        if c.get("deadline_days") or c.get("budget"):
            data["goal"] = {"tokens": c.get("tokens"), "deadline_days": c.get("deadline_days"),
                            "budget": c.get("budget") or None}
        elif c.get("tokens"):
            training["tokens"] = c["tokens"]
        return data

    def add_sweep_errors(self, errors: dict[str, list[str]]) -> None:
        """Put the sweep service's messages ({"vary.cluster.num_gpus": [...]}) next to their form fields."""
        for path, messages in errors.items():
            field = _field_of(path)
            for message in messages:
                self.add_error(field, message if field else f"{path}: {message}")

    def add_the_rest(self, check: Callable[[dict[str, Any]], Any]) -> None:
        """After the form's own refusals (a GPU count it cannot read, a row gone from the catalog), the sweep
        service's messages about the fields it did take, so that every field's problem is said in one round (the
        global batch's had come only once the GPU counts were mended). A field the form refused stands in at its
        default (the GPU count at the node's), and only what the service says of the fields it took, and not of
        one scenario, is kept: a scenario's message would be about the stand-in."""
        if not self.is_bound or not self.errors:
            return
        values = dict(self.cleaned_data)
        for name in ("model", "gpus", "nodes", "fabrics", "precisions", "global_batch"):
            if name not in values:
                values[name] = self.initial.get(name)
        node = self.catalog.get("node", {}).get((values.get("nodes") or [None])[0])
        if "num_gpus" not in values:
            values["num_gpus"] = [node["gpus"]] if node else []
        if not all(values.get(name) for name in ("model", "gpus", "nodes", "fabrics", "precisions", "num_gpus")):
            return
        try:
            check(self._payload(values))
        except SpecError as err:
            for path, messages in err.as_dict().items():
                field = _field_of(path)
                if field is None or field in self.errors:
                    continue
                for message in messages:
                    if "scenario {" not in message:
                        self.add_error(field, message)


def _field_of(path: str) -> str | None:
    """The form field that shows a message about a sweep path (vary.<path>, base.<path> or goal.<field>)."""
    bare = path.split(".", 1)[1] if path.startswith(("vary.", "base.")) else path
    return next((f for prefix, f in FIELD_OF if bare == prefix or bare.startswith(prefix + ".")), None)


def _whole(item: str) -> Any:
    """A GPU count as typed: 1e3 and 256.0 are the whole numbers 1000 and 256; anything else stays text, and the
    engine words what is wrong with it (a fraction, a word, a number beyond its bound)."""
    if item.isascii() and item.isdigit():  # "²" is a digit to isdigit, not to int
        return int(item)
    try:
        number = float(item)
    except ValueError:
        return item
    return int(number) if math.isfinite(number) and number == int(number) else item
