"""docs/schemas.md, generated from the JSON Schemas that `python -m pipeline schema NAME` prints
(`make schemas` rewrites it; a unit test fails when it is stale)."""

from pipeline.cli.commands.schema import SCHEMAS, schema_of

FILES = {
    "manifest": "runs/<model>/<recipe>/manifest.json",
    "eval": "runs/<model>/<recipe>/eval/<fingerprint>/results.json",
    "serve": "runs/<model>/<recipe>/serve/<fingerprint>/results.json",
    "publish": "quant_pipeline/publish.json in a published repo",
    "outcome": "what `--json` prints on stdout",
}


def _type(prop: dict) -> str:
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " | ".join(_type(p) for p in prop["anyOf"])
    if prop.get("type") == "array":
        return f"list[{_type(prop.get('items', {}))}]"
    if prop.get("type") == "object" and "additionalProperties" in prop:
        extra = prop["additionalProperties"]
        return f"dict[str, {_type(extra) if isinstance(extra, dict) else 'any'}]"
    if "enum" in prop:
        return " | ".join(f"`{v}`" for v in prop["enum"])
    return prop.get("type", "any")


def _table(schema: dict) -> list[str]:
    required = set(schema.get("required", []))
    lines = ["| field | type | required | description |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        desc = prop.get("description", "").replace("|", "\\|")
        mark = "yes" if name in required else ""
        kind = _type(prop).replace("|", "\\|")
        lines.append(f"| `{name}` | {kind} | {mark} | {desc} |")
    return lines


def render() -> str:
    out = [
        "# Result files (generated: `make schemas`; do not edit)",
        "",
        "Each is a pydantic model; `python -m pipeline schema NAME` prints its JSON Schema. Every",
        "file carries `schema_version`; readers in the pipeline validate against these models.",
    ]
    for name in sorted(SCHEMAS):
        schema = schema_of(name)
        out += ["", f"## `{name}`: {FILES[name]}", "", *_table(schema)]
        for sub, sub_schema in sorted(schema.get("$defs", {}).items()):
            if sub_schema.get("properties"):
                out += ["", f"### {sub}", "", *_table(sub_schema)]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
