"""Comments and docstrings in registry/ and cli/ state a rule and why, in the present tense; they do not tell the
story of how it was found. A measurement that stands behind a rule lives in docs/BENCHMARKS.md (with its result
file, date and machine), and the comment points there ("see docs/BENCHMARKS.md, <section>").

What is refused here is what the code's comments had slipped into: the first person ("we tried"), an experiment
and its reversal, issue numbers and dates, the machine a number was taken on ("on a 2-core VM", "the H100
machine"), and a model named as one run of it ("a YOLOv8n: 54 s", "the ViT's softmax"). A model that is the rule's
subject is left alone: "a ResNet-style CNN", "HuggingFace BERT-family exports".
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = [REPO / "registry", REPO / "cli"]

MODELS = r"(?:YOLO\w*|ViT|ResNet\w*|MobileNet\w*|EfficientNet\w*|BERT|ConvNeXt|GPT-2|DeiT|PaddleOCR|ddddocr)"
# A number with the unit of a measurement: 54 s, 155 µs, 9%, 1.85x (not 96x96, not a count of tasks).
MEASUREMENT = r"\d(?:[\d.,]*\d)?\s?(?:s|ms|µs|us|ns|%|x)(?![\w-])"

NARRATION = {
    "first person": re.compile(r"\b(?:[Ww]e|[Ww]e've|[Ww]e're|[Oo]ur)\b"),
    "an experiment told": re.compile(r"\b(?:we tried|reverted|used to be)\b", re.I),
    "an issue number": re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w&#])#\d{2,}\b"),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "the machine a number was taken on": re.compile(
        r"\b\d+-(?:core|vCPU) (?:[\w-]+ )?VM\b"
        r"|\bthe \d+-(?:core|vCPU) (?:[\w-]+ )?machine\b"
        r"|\b(?:H100|H200|GPU|CPU) machine\b"
        r"|\b(?:[Tt]his|[Tt]hat|[Tt]he|[Mm]y) VM\b"
        r"|\bmeasured on (?:a|an|the) (?:[\w-]+ )?(?:H100|H200|Xeon|EPYC)\b"
    ),
    # A model is a rule's subject ("a ResNet-style CNN", "a ConvNeXt's residual add"); "the ViT", or a model beside
    # a measurement, is one run being told.
    "a model named as one run": re.compile(
        rf"\b[Tt]he {MODELS}(?![\w-])|\b{MODELS}(?![\w-]).*?{MEASUREMENT}|{MEASUREMENT}.*?\b{MODELS}(?![\w-])"
    ),
}


def comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every comment, and of every string that stands alone as a statement (a docstring)."""
    out = []
    previous = tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.COMMENT:
            out.append((token.start[0], token.string))
        elif token.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            out += [(token.start[0] + i, line) for i, line in enumerate(token.string.splitlines())]
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type
    return out


def findings(path: Path, texts: list[tuple[int, str]]) -> list[str]:
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    return [
        f"{where}:{number}: {what}: {m.group(0)!r} in {text.strip()[:120]!r}"
        for number, text in texts
        for what, rule in NARRATION.items()
        for m in rule.finditer(text)
    ]


def test_comments_state_rules_not_history():
    found = [
        f
        for root in ROOTS
        for path in sorted(root.rglob("*.py"))
        for f in findings(path, comments_and_docstrings(path))
    ]
    assert not found, "comments that narrate (state the rule; move a measurement to docs/BENCHMARKS.md):\n" + "\n".join(
        found
    )


def test_the_rules_catch_what_they_are_for(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""We tried a larger batch first (issue 35); it was reverted on 2026-11-24."""\n'
        "\n"
        "\n"
        "def f():\n"
        '    """Measured on an H100: 1.8 s, against 0.7 s on the 2-core VM."""\n'
        "    x = 1  # a YOLOv8n: 54 s; the ViT's softmax stopped at 327 s (see #54)\n"
        '    return "we tried: a YOLOv8n on a 2-core VM"  # a string that is code, not a docstring\n'
    )
    found = findings(planted, comments_and_docstrings(planted))
    kinds = {f.split(": ")[1] for f in found}
    assert kinds == set(NARRATION), found
    assert not [f for f in found if ":7:" in f], found  # the returned string is code
    rule_subjects = tmp_path / "subjects.py"
    rule_subjects.write_text(
        '"""A ResNet-style CNN; HuggingFace BERT-family exports; the Relax VM; this machine\'s CPU; TVM."""\n'
        "# a shared machine's timings drift; the device a record was measured on\n"
    )
    assert not findings(rule_subjects, comments_and_docstrings(rule_subjects))
