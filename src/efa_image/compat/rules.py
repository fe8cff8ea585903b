"""Version-compatibility rules between the image's components, checked before a build.

Known-bad combinations (NCCL 2.19+ on an old EFA installer, a plugin that needs a
newer libfabric, NCCL built for another CUDA major, PyTorch's NCCL differing from
the image's) build fine and fail only at run time on GPUs, so they are caught
from version facts before any build and again by verification.

Rules live in data/compatibility.yml. Each has an id, reason, fix, reference,
optional `when` (facts that make it apply) and `require` (what must then hold).
A constraint is a word such as `source` (string equality) or one or more
comma-separated `OP VERSION` with OP in >= <= > < == !=; VERSION may name another
fact as `{fact}` or its first N components as `{fact:N}`. `==`/`!=` compare only as
many components as the right-hand side has, so `== 2.21` matches 2.21.5.
"""

from __future__ import annotations

import contextlib
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from efa_image.datafiles import read_yaml
from efa_image.errors import EfaImageError

DEFAULT_RULES = "compatibility.yml"
CONSTRAINT = re.compile(r"^(>=|<=|==|!=|>|<)\s*(\S.*)$")
REFERENCE = re.compile(r"\{(\w+)(?::(\d+))?\}")
ORDER = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
REQUIRED_KEYS = ("id", "reason", "fix", "reference", "require")


class RuleError(EfaImageError, ValueError):
    """The rules data is malformed; the message names the rule."""


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.30.4-1' -> (2, 30, 4, 1); '1.22.0amzn4.0' -> (1, 22, 0); '2.21.5+cuda12' -> (2, 21, 5).

    Numeric parts split on '.' and '-'; a part with a suffix ends the version (0amzn4 -> 0).
    """
    parts: list[int] = []
    for part in re.split(r"[.-]", version.strip().lstrip("vV").split("+", 1)[0]):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.end() != len(part):
            break
    if not parts:
        raise ValueError(f"not a version: {version!r}")
    return tuple(parts)


def nccl_version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE -> 'X.Y.Z': major*10000+minor*100+patch from 2.9, major*1000+... before."""
    if code <= 0:
        raise ValueError(f"not an NCCL version code: {code}")
    major_unit = 10000 if code >= 10000 else 1000
    return f"{code // major_unit}.{code % major_unit // 100}.{code % 100}"


def torch_nccl_version(value: object) -> str:
    """torch.cuda.nccl.version(): (2, 21, 5) in recent PyTorch, an int code (2708) in old ones."""
    if isinstance(value, tuple | list):
        return ".".join(str(int(part)) for part in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return nccl_version_from_code(value)
    text = str(value).strip()
    if text.isdigit():
        return nccl_version_from_code(int(text))
    return ".".join(re.findall(r"\d+", text)) if text[:1] in "([" else text  # '(2, 21, 5)'


def nccl_cuda_major(spec: str) -> str | None:
    """CUDA major an NCCL build targets: 'nvidia-nccl-cu12' or '2.21.5-1+cuda12.4' -> '12'."""
    match = re.search(r"(?:[-_]cu|\+cuda)(\d+)", spec)
    return match.group(1) if match else None


def rmm_cuda_major(filename: str) -> str | None:
    """CUDA major of a librmm wheel: 'librmm_cu12-26.10.0-py3-...whl' -> '12'."""
    match = re.match(r"librmm[-_]cu(\d+)(?!\d)", filename)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Rule:
    id: str
    reason: str
    fix: str
    reference: str
    require: dict[str, str]
    when: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Violation:
    rule: str
    reason: str
    fix: str
    reference: str
    subject: str  # e.g. 'nccl 2.30.4'; '' when the rule has no `when`
    fact: str
    have: str
    want: str  # the constraint, references resolved, e.g. '>= 1.29'

    @property
    def message(self) -> str:
        if self.subject:
            head = f"{self.subject} needs {self.fact} {self.want} (have {self.have})"
        else:
            head = f"{self.fact} {self.have} must be {self.want}"
        return f"{head}: {self.reason.rstrip('.')}. Fix: {self.fix}"


@dataclass(frozen=True)
class Skipped:
    rule: str
    why: str


@dataclass
class Check:
    violations: list[Violation] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def _check_constraint(label: str, fact: str, text: str) -> None:
    for part in text.split(","):
        match = CONSTRAINT.match(part.strip())
        value = (match.group(2) if match else part).strip()
        try:
            if not value:
                raise ValueError(text)
            if match and not REFERENCE.search(value):
                version_tuple(value)
        except ValueError:
            raise RuleError(f"{label}: bad constraint for {fact}: {text!r}") from None


def _parse_rule(raw: object, index: int, where: str) -> Rule:
    name = raw.get("id") if isinstance(raw, dict) else None
    label = f"{where}: rule {name!r}" if name else f"{where}: rule #{index + 1}"
    if not isinstance(raw, dict):
        raise RuleError(f"{label}: expected a mapping")
    if missing := [key for key in REQUIRED_KEYS if not raw.get(key)]:
        raise RuleError(f"{label}: missing {', '.join(repr(k) for k in missing)}")
    when, require = raw.get("when") or {}, raw["require"]
    if not isinstance(when, dict) or not isinstance(require, dict):
        raise RuleError(f"{label}: 'when' and 'require' must map fact -> constraint")
    for fact, text in {**when, **require}.items():
        _check_constraint(label, str(fact), str(text))
    return Rule(
        id=str(raw["id"]),
        reason=" ".join(str(raw["reason"]).split()),
        fix=" ".join(str(raw["fix"]).split()),
        reference=str(raw["reference"]),
        require={str(k): str(v) for k, v in require.items()},
        when={str(k): str(v) for k, v in when.items()},
    )


def load_rules(path: Path | str | None = None) -> list[Rule]:
    """The rules in `path`, or the packaged data/compatibility.yml."""
    data, where = read_yaml(DEFAULT_RULES, path, RuleError)
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise RuleError(f"{where}: expected a top-level 'rules:' list")
    rules = [_parse_rule(raw, i, where) for i, raw in enumerate(data["rules"])]
    if len({rule.id for rule in rules}) != len(rules):
        raise RuleError(f"{where}: rule ids must be unique")
    return rules


def _resolve(value: str, facts: Mapping[str, str]) -> str:
    """Replace {fact} / {fact:N}; KeyError names a missing fact."""

    def sub(match: re.Match[str]) -> str:
        found = facts[match.group(1)]
        if match.group(2) is None:
            return found
        return ".".join(str(p) for p in version_tuple(found)[: int(match.group(2))])

    return REFERENCE.sub(sub, value)


def _holds(fact: str, constraint: str, facts: Mapping[str, str]) -> tuple[bool, str]:
    """Whether facts[fact] meets `constraint`, and the constraint as resolved for messages."""
    have, results, shown = facts[fact], [], []
    for part in constraint.split(","):
        match = CONSTRAINT.match(part.strip())
        if match is None:
            results.append(have == part.strip())
            shown.append(part.strip())
            continue
        op, want = match.group(1), _resolve(match.group(2).strip(), facts)
        try:
            left, right = version_tuple(have), version_tuple(want)
        except ValueError as error:
            raise ValueError(f"cannot compare {fact} {have!r} with {want!r}: {error}") from None
        if op in ("==", "!="):
            results.append((left[: len(right)] == right) == (op == "=="))
        else:
            width = max(len(left), len(right))
            pad = (0,) * width
            results.append(ORDER[op]((left + pad)[:width], (right + pad)[:width]))
        sources = [f"{m.group(1)} {facts[m.group(1)]}" for m in REFERENCE.finditer(match.group(2))]
        shown.append(f"{op} {want}" + (f" (from {', '.join(sources)})" if sources else ""))
    return all(results), ", ".join(shown)


def _subject(rule: Rule, facts: Mapping[str, str]) -> str:
    """The versions that made a rule apply: 'nccl 2.30.4' (plain-string conditions left out)."""
    versioned = [f for f, c in rule.when.items() if CONSTRAINT.match(c.split(",")[0].strip())]
    return ", ".join(f"{f} {facts[f]}" for f in versioned or rule.when)


def check(facts: Mapping[str, object], rules: list[Rule] | None = None) -> Check:
    """Apply every rule to `facts` (component -> version); absent facts skip a rule."""
    known = {k: str(v).strip() for k, v in facts.items() if v is not None and str(v).strip()}
    for torch_fact in ("torch_nccl", "torch_nccl_built"):
        if facts.get(torch_fact) is not None:
            with contextlib.suppress(ValueError):  # else left as is, and its rule is skipped
                known[torch_fact] = torch_nccl_version(facts[torch_fact])
    result = Check()
    for rule in load_rules() if rules is None else rules:
        try:
            when = [(f, *_holds(f, c, known)) for f, c in rule.when.items()]
            if unmet := [f"{f} is {known[f]}, rule needs {c}" for f, ok, c in when if not ok]:
                result.skipped.append(Skipped(rule.id, "does not apply: " + "; ".join(unmet)))
                continue
            outcomes = [(f, *_holds(f, c, known)) for f, c in rule.require.items()]
        except KeyError as missing:
            result.skipped.append(Skipped(rule.id, f"no {missing.args[0]} fact"))
            continue
        except ValueError as error:
            result.skipped.append(Skipped(rule.id, str(error)))
            continue
        failed = [(fact, want) for fact, ok, want in outcomes if not ok]
        subject = _subject(rule, known)
        for fact, want in failed:
            result.violations.append(
                Violation(
                    rule.id, rule.reason, rule.fix, rule.reference, subject, fact, known[fact], want
                )
            )
        if not failed:
            result.passed.append(rule.id)
    return result
