"""Fuzzed records (tests/fuzz_records.py) never crash the import path, and what it accepts replays exactly.

The fuzzer runs in a child process: a segfault there fails this test with its signal instead of ending the run.
``REGISTRY_FUZZ_EXAMPLES`` and ``REGISTRY_FUZZ_SEED`` run it longer or elsewhere (CI: 2,000 examples, seed 0,
about 30 s here).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = int(os.environ.get("REGISTRY_FUZZ_EXAMPLES", "2000"))
SEED = int(os.environ.get("REGISTRY_FUZZ_SEED", "0"))
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.tvm
def test_fuzzed_records_never_crash_and_accepted_ones_replay_exactly(tuned_logs):
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests/fuzz_records.py"), str(tuned_logs.work_dir), str(EXAMPLES), str(SEED)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if done.returncode < 0:
        pytest.fail(f"the fuzzer died of {signal.Signals(-done.returncode).name}:\n{done.stderr[-3000:]}")
    assert done.returncode == 0, done.stderr[-5000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    print(counts)
    assert counts["examples"] >= EXAMPLES
    # both ways taken, often: a fuzzer that only made garbage (or only valid records) would prove little
    assert counts["refused"] >= EXAMPLES // 4 and counts["accepted"] >= EXAMPLES // 20, counts
    assert counts["accepted with other decisions"] >= EXAMPLES // 40, counts
