#!/usr/bin/env python3
"""Writes each case's "expected" in jinja_cases.json: the case rendered by Python's Jinja2 set up as transformers'
apply_chat_template sets it up (trim_blocks, lstrip_blocks, loop controls, its tojson and raise_exception), or
{"error": ...} where Jinja2 refuses it. jinja_test.cpp checks Rudder's renderer against these. Run it again after
changing a case: python3 tests/text/jinja_cases_expected.py (needs python3-jinja2)."""
import json
import pathlib

import jinja2
import jinja2.ext
import jinja2.sandbox

CASES = pathlib.Path(__file__).with_name("jinja_cases.json")


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    cases = json.loads(CASES.read_text(encoding="utf-8"))
    env = environment()
    for case in cases:
        try:
            case["expected"] = env.from_string(case["template"]).render(**case["variables"])
        except Exception as e:  # noqa: BLE001 - any refusal is the expectation
            case["expected"] = {"error": str(e)}
    text = "[\n" + ",\n".join(" " + json.dumps(c, ensure_ascii=False) for c in cases) + "\n]\n"
    CASES.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
