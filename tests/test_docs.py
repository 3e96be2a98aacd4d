"""README.md and docs/*.md are references, not a lab notebook: no commit hashes, no temporary paths, no talk of the
session or the VM that wrote them, and every relative link (and #anchor) resolves.

A result is stated with what it stands on: its result file under bench/results/ (which keeps its own commit stamp:
it is data), its date, the machine by its description ("a 2-core AMD EPYC VM (znver5)"). History belongs in
CHANGELOG.md, which this test does not read.

Seen failing: on the docs of 2026-11-28, before their clean-up, it reported 31 commit hashes (23 in BENCHMARKS.md,
8 in GPU.md; without git, the fallback rule finds 30: not the one in a code span), 9 temporary paths (GPU.md's /tmp
staging, work and install folders, BENCHMARKS.md's "/tmp-only instrumentation") and 38 findings of session talk
("this VM" 21 times, "the VM" 8, "this session's device time", "today's code", "the day before", "that hour").
Every link resolved then. Each rule, the link check included, is also seen failing on planted text in
test_the_rules_catch_what_they_are_for.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")

# A word of hex digits standing alone (not part of a file name like gpu_proof_2026-11-28-094c43b/ or a 0x value),
# with at least one digit and one letter: 1000000 and "deadbeef" are not commits.
HEX_WORD = re.compile(r"(?<![\w./-])[0-9a-f]{7,40}(?![\w/-]|\.\w)")
# Without git's history (no git, a shallow clone), a hash is what a short hash looks like, outside code.
SHORT_HASH = re.compile(r"^(?=.*[0-9])(?=.*[a-f])[0-9a-f]{7,12}$")

TEMP_PATH = re.compile(
    r"(?<![\w.~/$-])(/tmp|/var/tmp|/dev/shm|/work|/root|/home/[\w.-]+|/Users/[\w.-]+)(?=[/\s`'\")\],;:.]|$)"
)

# How the docs slipped into a notebook (git log -p docs/BENCHMARKS.md docs/GPU.md): the machine a run happened on
# called "this VM" or "the VM" instead of described, the session and its device time, the day, the first person.
# Legitimate and left alone: "this machine", "this host", "this CPU" (the CLI's docs mean the machine a command runs
# on), "the same VM" and "another VM" (a method: which runs shared a machine), "the Relax VM" (TVM's virtual
# machine, not a computer).
SESSION_TALK = [
    re.compile(r"\b(?:[Tt]his|[Tt]hat|[Tt]he|[Oo]ur|[Mm]y) VM\b"),
    re.compile(r"\b[Tt]his (?:[\w-]+ )?(?:Xeon|EPYC|Ryzen|Zen|H100|H200)\b"),
    re.compile(
        r"\b(?:this|that|last|earlier|next|previous|later|current|same|whole|another|each|every) sessions?\b", re.I
    ),
    re.compile(r"\bsessions?(?:'s)? (?:time|lent|with)\b", re.I),
    re.compile(r"\b(?:today|yesterday|tonight|tomorrow)(?:'s)?\b", re.I),
    re.compile(r"\b(?:this|that|the next|the previous) (?:morning|afternoon|evening|night|day|hour)\b", re.I),
    re.compile(r"\bthe day (?:before|after)\b", re.I),
    re.compile(r"\b(?:this|that|the last|the previous|the next|HEAD) commit\b", re.I),
    re.compile(r"(?<![\w/.-])I(?=\s+[a-z]|'[a-z])"),
    re.compile(r"\b(?:[Ww]e|[Oo]urs?|[Ww]e've|[Ww]e're)\b"),
]

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)


def lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, line, inside a fenced code block) for every line; the fences themselves count as code."""
    out, fenced, opener = [], False, ""
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and (not fenced or m.group(1) == opener):
            fenced, opener = not fenced, m.group(1)
            out.append((number, line, True))
            continue
        out.append((number, line, fenced))
    return out


def prose(line: str) -> str:
    """The line with its code spans blanked (same length, so columns still point into the line)."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def git_history() -> bool:
    """Whether this checkout's whole history is here to tell a commit from other hex."""
    if not shutil.which("git"):
        return False
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == "false"


def commits(words: set[str]) -> set[str]:
    """The words that name a commit of this repository (one `git cat-file --batch-check` for all)."""
    if not words:
        return set()
    ordered = sorted(words)
    r = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "--batch-check"],
        input="".join(f"{w}^{{commit}}\n" for w in ordered),
        capture_output=True,
        text=True,
        check=True,
    )
    answers = r.stdout.splitlines()
    assert len(answers) == len(ordered), r.stdout
    return {w for w, answer in zip(ordered, answers, strict=True) if not answer.endswith("missing")}


def hash_findings(path: Path, text: str, use_git: bool) -> list[str]:
    """Commit hashes: with git's history, any hex word (code included) that git resolves to a commit; without it,
    a 7-12 character hex word with a digit and a letter outside code."""
    candidates = []
    for number, line, code in lines(text):
        for m in HEX_WORD.finditer(line):
            word = m.group(0)
            if re.search(r"[0-9]", word) and re.search(r"[a-f]", word):
                in_code = code or prose(line)[m.start()] == " "
                candidates.append((number, word, in_code))
    if use_git:
        found = commits({word for _, word, _ in candidates})
        hits = [(n, w) for n, w, _ in candidates if w in found]
    else:
        hits = [(n, w) for n, w, in_code in candidates if not in_code and SHORT_HASH.match(w)]
    return [f"{relative(path)}:{n}: commit hash {w!r}" for n, w in hits]


def temp_path_findings(path: Path, text: str) -> list[str]:
    return [
        f"{relative(path)}:{number}: temporary path {m.group(0)!r} in {line.strip()[:100]!r}"
        for number, line, _ in lines(text)
        for m in TEMP_PATH.finditer(line)
    ]


def session_findings(path: Path, text: str) -> list[str]:
    """Session talk in prose and in code blocks' comments alike; code spans quote output and are left alone."""
    out = []
    for number, line, _ in lines(text):
        visible = prose(line)
        for rule in SESSION_TALK:
            for m in rule.finditer(visible):
                out.append(f"{relative(path)}:{number}: {m.group(0)!r} in {line.strip()[:120]!r}")
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its rendered text lowercased, punctuation dropped (letters, digits, `_`, `-`
    and spaces kept), spaces to hyphens."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text)
    parts = re.split(r"(`+.+?`+)", text)
    rendered = []
    for i, part in enumerate(parts):
        if i % 2:  # a code span: its content as is
            rendered.append(part.strip("`"))
        else:  # emphasis markers are markup, not text
            rendered.append(re.sub(r"(?<!\w)_+|_+(?!\w)|\*+", "", part))
    text = "".join(rendered).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line, code in lines(text):
        if code:
            continue
        out.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def link_findings(path: Path, text: str) -> list[str]:
    """Every relative link names a file of this repository, and an #anchor a heading of that Markdown file."""
    out = []
    for number, line, code in lines(text):
        if code:
            continue
        visible = prose(line)
        targets = [m.group(1) for m in LINK.finditer(visible)]
        targets += [m.group(1) for m in REF_LINK.finditer(visible)]
        for target in targets:
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            where = f"{relative(path)}:{number}: link {target!r}"
            if not file_part:
                if urllib.parse.unquote(anchor) not in anchors(text):
                    out.append(f"{where}: no heading #{anchor} here")
                continue
            dest = (path.parent / urllib.parse.unquote(file_part)).resolve()
            if not dest.is_relative_to(REPO):
                out.append(f"{where} leaves the repository")
            elif not dest.exists():
                out.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and urllib.parse.unquote(anchor) not in anchors(dest.read_text()):
                out.append(f"{where}: no heading #{anchor} in {relative(dest)}")
    return out


def check(finder) -> None:
    findings = [f for path in DOCS for f in finder(path, path.read_text())]
    assert not findings, f"{len(findings)} finding(s):\n" + "\n".join(findings)


def test_no_commit_hashes():
    """A commit hash says when, not what: name the result file, the date, or the change (CHANGELOG.md)."""
    use_git = git_history()
    check(lambda path, text: hash_findings(path, text, use_git))


def test_no_temporary_paths():
    check(temp_path_findings)


def test_no_session_talk():
    """Describe the machine ("a 2-core AMD EPYC VM (znver5)"), state the result or the method, not the session."""
    check(session_findings)


def test_links_resolve():
    check(link_findings)


def test_the_rules_catch_what_they_are_for():
    """Each rule flags a planted line and leaves its legitimate look-alikes alone."""
    doc = REPO / "docs" / "PLANTED.md"  # never written: the finders take the text
    flagged = {
        "temporary": "results in /tmp/cnn/run.json and /home/alice/x, `--work /work/main`",
        "session": "On this VM it ran 1.2x; this session's device time; today's code; I tried; the day before",
        "machine": "onnxruntime on this rocketlake Xeon; within the VM's noise; we measured",
    }
    for line in flagged.values():
        assert temp_path_findings(doc, line) or session_findings(doc, line), line
    assert len(temp_path_findings(doc, flagged["temporary"])) == 3
    assert len(session_findings(doc, flagged["session"])) == 5
    assert len(session_findings(doc, flagged["machine"])) == 3
    legitimate = (
        "`host` (this machine), never this host's; the Relax VM's calls; on the same VM, then another VM; "
        "an RPC session of its own; best so far; "
        "bench/work/corpus32; 1000000 records; sha256 "
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855; gpu_proof_2026-11-28-094c43b/; I/O"
    )
    assert not temp_path_findings(doc, legitimate)
    assert not session_findings(doc, legitimate)
    assert not hash_findings(doc, legitimate, use_git=False)
    assert hash_findings(doc, "measured at 094c43b, on a2f9e1c", use_git=False) == [
        "docs/PLANTED.md:1: commit hash '094c43b'",
        "docs/PLANTED.md:1: commit hash 'a2f9e1c'",
    ]
    assert not hash_findings(doc, "```\nat 094c43b\n```\nthe `a2f9e1c` value", use_git=False)
    if git_history():
        # the whole hash: a short one may be all digits (9268420 was), which no rule can tell from a number
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert hash_findings(doc, f"```\nat {head}\n```", use_git=True), head  # in code too, with git's history
        assert not hash_findings(doc, legitimate, use_git=True)

    assert slug("Sigmoids vectorized at TVM's lowering (`bench/results/sigmoid.json`)") == (
        "sigmoids-vectorized-at-tvms-lowering-benchresultssigmoidjson"
    )
    assert slug("Output checks (`cnn-starter-check.json`, `output_check.json`)") == (
        "output-checks-cnn-starter-checkjson-output_checkjson"
    )
    assert slug("One-shot compile: transfer --no-measure") == "one-shot-compile-transfer---no-measure"
    assert anchors("# Top\n```sh\n# not a heading\n```\n## Top\n") == {"top", "top-1"}
    bad = (
        "# A\n[x](README.md) [y](#nowhere) [z](BENCHMARKS.md#nowhere) [w](../../outside.md) [ok](#a) [ok](CLI.md) "
        "[ok](https://example.org/x.md) `[c](gone.md)`"
    )
    found = link_findings(doc, bad)
    assert len(found) == 4 and all("PLANTED.md:2: link" in f for f in found), found
