"""A prompt side's template (issue 24, item 3): checked placeholders, rendered over an item."""

from __future__ import annotations

import pytest

from policies.prompt_templates import TemplateError, check_template, render, template_hash


def test_a_template_replaces_the_last_user_message_after_its_system_text() -> None:
    t = check_template({"system": "Brief, for {{metadata.product}}.", "user": "Q: {{ input }} [{{metadata.missing}}]"})
    convo = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
             {"role": "user", "content": "second"}]
    assert render(t, convo, {"product": "router"}) == [
        {"role": "system", "content": "Brief, for router."}, {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Q: second []"}]
    assert template_hash(t) == template_hash(dict(t)) != template_hash({**t, "user": "Q: {{input}}"})


@pytest.mark.parametrize("raw, part", [
    ({"user": "{{expected}}"}, "user"),
    ({"system": "{{input.x}}", "user": "{{input}}"}, "system"),
    ({"user": ""}, "user"),
    ({"user": "x", "model": "m"}, "model"),
    ("not an object", ""),
])
def test_a_template_with_an_unknown_placeholder_or_field_is_refused_naming_it(raw: object, part: str) -> None:
    with pytest.raises(TemplateError) as refused:
        check_template(raw)
    assert refused.value.part == part
