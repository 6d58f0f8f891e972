"""The one strict base for configuration (unknown keys are errors) and the one formatter that
turns a pydantic error into a user's one line: where (file:line), which key, what is valid."""

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.core.errors import UserError

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    # unknown keys are typos; inf / nan are never a size, a fraction or a count
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def validated(model: type[M], data: object, source: str, text: str | None = None) -> M:
    """model.model_validate(data), or a UserError naming `source` (a file, or what the data is),
    the line in `text` (the YAML it came from) when known, the key and what is valid there."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise UserError(explain(e, model, source, text)) from None


def explain(error: ValidationError, model: type[BaseModel], source: str, text: str | None) -> str:
    first = error.errors()[0]
    loc = tuple(first["loc"])
    dotted = ".".join(str(p) for p in loc)
    line = line_of(text, loc) if text else None
    where = f"{source}:{line}" if line else source
    if first["type"] == "extra_forbidden":
        valid = ", ".join(_fields_at(model, loc[:-1]))
        return f"{where}: unknown key '{dotted}'" + (f" (valid here: {valid})" if valid else "")
    if first["type"] == "missing":
        return f"{where}: missing key '{dotted}'"
    if not loc and first["type"] == "value_error":  # a rule across keys (a model validator)
        return f"{where}: {first['msg'].removeprefix('Value error, ')}"
    if not loc:  # the document itself has the wrong shape
        return f"{where}: must be a mapping of keys (got {repr(first.get('input'))[:60]})"
    got = repr(first.get("input"))
    got = got if len(got) <= 60 else got[:57] + "..."
    return f"{where}: {dotted}: {first['msg']} (got {got})"


def _fields_at(model, loc: tuple) -> list[str]:
    """Field names of the pydantic model that holds the key at `loc` (list indexes skipped)."""
    for key in loc:
        if isinstance(key, int):
            continue
        field = getattr(model, "model_fields", {}).get(str(key))
        model = _model_in(field.annotation) if field else None
    return list(getattr(model, "model_fields", {}))


def _model_in(annotation):
    """The pydantic model inside an annotation such as `Spec`, `list[Spec]`, `Spec | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found:
            return found
    return None


def line_of(text: str, loc: tuple) -> int | None:
    """1-based line of the key at `loc` in the YAML text, for error messages."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for key in loc:
        if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
            continue
        if not isinstance(node, yaml.MappingNode):
            return line
        for k, v in node.value:
            if k.value == str(key):
                line, node = k.start_mark.line + 1, v
                break
        else:
            return line
    return line


def display(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_yaml(path: Path, what: str) -> tuple[object, str]:
    """(data, text) of a YAML file, or a one-line UserError with the line of the problem."""
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{display(path)}: not UTF-8 text (byte {e.start})") from None
    try:
        return yaml.safe_load(text), text
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise UserError(f"{display(path)}{where}: malformed YAML: {problem}") from None
