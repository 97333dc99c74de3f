"""Form fields to the API's request bodies, so the console's writes go through the API's own decoders.

A field's ``name`` is its JSON path without ``$.`` (``candidate_price.input_per_mtok_usd``),
so an API refusal naming ``$.candidate_price.input_per_mtok_usd`` is shown at that field.
An empty field is left out (the API's default applies); a number field holding text is
passed on as text, and the API's decoder names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sidecar.ingest.wire import encode
from sidecar.trials.create import TrialCreate, decode_create


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    label: str
    kind: str  # "text", "int", "float"
    required: bool = False
    hint: str = ""
    group: str = "trial"

    @property
    def advanced(self) -> bool:
        """Grouped under the form's *Advanced* disclosure: everything but the five a trial needs first."""
        return self.name not in BASIC_FIELDS

    @property
    def dom_id(self) -> str:
        return "f-" + self.name.replace(".", "-").replace("_", "-")


BASIC_FIELDS = frozenset({"team", "incumbent_model", "candidate_model", "spend_cap_usd", "sample_rate"})

TRIAL_FIELDS: tuple[Field, ...] = (
    Field("team", "Team", "text", True),
    Field("incumbent_model", "Incumbent model (served today)", "text", True, "An alias from the price hints, or an upstream name."),
    Field("candidate_model", "Candidate model", "text", True, "Dispatched on sampled traffic; never shown to users."),
    Field("spend_cap_usd", "Spend cap (US dollars)", "float", True, "A ceiling for candidate and judge calls together."),
    Field("sample_rate", "Sample rate (0 to 1)", "float", False, "Default 0.1."),
    Field("expected_cases", "Expected judged cases", "int", False, "Default 1000; tunes the decision rule."),
    Field("tolerance", "Tolerance on the win-rate scale", "float", False, "Default 0.05."),
    Field("min_cases", "Minimum judged cases", "int", False, "Default 20."),
    Field("route", "Route filter", "text", False, "Only exchanges of this route."),
    Field("gateway", "Gateway filter", "text", False, "Only exchanges of this gateway."),
    Field("audit_share", "Position-bias audit share (0 to 1)", "float", False, "Default from the config."),
    Field("max_tokens", "Candidate max tokens", "int", False, "Default: the request's own, else the config's."),
    Field("on_decision", "Once decided", "text", False,
          "stop (default): dispatch nothing more; continue: keep narrowing the bounds up to the expected cases."),
    Field("judge.model", "Judge model", "text", False, "Default from the config.", "judge"),
    Field("judge.rubric", "Judge rubric", "text", False, "", "judge"),
    Field("judge.max_tokens", "Judge max tokens", "int", False, "", "judge"),
    Field("judge.temperature", "Judge temperature", "float", False, "", "judge"),
    Field("candidate_price.input_per_mtok_usd", "Candidate input price ($ per million tokens)", "float", False, "", "prices"),
    Field("candidate_price.output_per_mtok_usd", "Candidate output price ($ per million tokens)", "float", False, "", "prices"),
    Field("judge_price.input_per_mtok_usd", "Judge input price ($ per million tokens)", "float", False, "", "prices"),
    Field("judge_price.output_per_mtok_usd", "Judge output price ($ per million tokens)", "float", False, "", "prices"),
    Field("incumbent_price.input_per_mtok_usd", "Incumbent input price ($ per million tokens)", "float", False, "", "prices"),
    Field("incumbent_price.output_per_mtok_usd", "Incumbent output price ($ per million tokens)", "float", False, "", "prices"),
)


def _number(kind: str, text: str) -> Any:
    try:
        return int(text) if kind == "int" else float(text)
    except ValueError:
        return text  # the API's decoder refuses it, naming the field


def trial_body(form: Mapping[str, str]) -> dict[str, Any]:
    """The JSON body of ``POST /v1/trials`` that the form's fields spell."""
    body: dict[str, Any] = {}
    for field in TRIAL_FIELDS:
        text = form.get(field.name, "").strip()
        if not text:
            continue
        value = text if field.kind == "text" else _number(field.kind, text)
        head, _, tail = field.name.partition(".")
        if tail:
            body.setdefault(head, {})[tail] = value
        else:
            body[head] = value
    return body


def decode_trial_form(form: Mapping[str, str]) -> tuple[TrialCreate, bytes]:
    """The create body, decoded and checked exactly as the API does, and its canonical encoding
    (the Idempotency-Key's fingerprint); :class:`~sidecar.errors.BadRequest` names a field."""
    create = decode_create(encode(trial_body(form)))
    return create, encode(create)


def field_name(api_field: str | None) -> str | None:
    """The form field an API error's ``field`` (``$.judge.model``) names, if any."""
    if not api_field or not api_field.startswith("$."):
        return None
    name = api_field[2:]
    return name if any(f.name == name for f in TRIAL_FIELDS) else None


def field_names(api_field: str | None) -> tuple[str, ...]:
    """Every form field an API error's ``field`` covers: ``$.candidate_price`` covers both of the
    candidate's price fields, ``$.judge`` every judge field; ``$.team`` just the team."""
    if not api_field or not api_field.startswith("$."):
        return ()
    name = api_field[2:]
    return tuple(f.name for f in TRIAL_FIELDS if f.name == name or f.name.startswith(name + "."))


def label_of(name: str | None) -> str | None:
    """A form field's label, for a message in the product's words."""
    return next((f.label for f in TRIAL_FIELDS if f.name == name), None)
