"""Record what resuming the flat package's checkpoints gives on this machine's kernel
family (``tests/recorded.py``), from the repository root::

    python tests/data/legacy_v3/record_expected.py

Run it once per kernel family the machine can run (the default; e.g.
``OPENBLAS_CORETYPE=Prescott`` on the command line), only when a change of behaviour
is intended or a pinned package is upgraded. The record of Haswell/X86_V3 is what
evocamp 0.1 itself gave (``make_legacy.py``); keep it unless behaviour changes.
"""

import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(TESTS), str(TESTS / "unit"), str(TESTS / "plugins")]

from recorded import record_digests  # noqa: E402
from test_files import LEGACY, LEGACY_NAMES, resumed_legacy_digest  # noqa: E402

with tempfile.TemporaryDirectory() as folder:
    digests = {}
    for name in LEGACY_NAMES:
        as_read, as_rewritten = resumed_legacy_digest(name, Path(folder))
        assert as_read == as_rewritten, name
        digests[name] = as_read
print(record_digests(LEGACY / "expected.json", digests))
