"""The ``fedsched`` program tunes the cyclic collector of its own process, and ``main`` (which tests
call in theirs) does not."""

from __future__ import annotations

import gc
import subprocess
import sys

from services.cli.main import main
from services.runtime.collector_tuning import MIDDLE, OLD, YOUNG

PROBE = """
import gc, sys
from services.cli import main as cli
seen = []
def handler(args):
    seen.append((gc.get_threshold(), gc.get_freeze_count()))
    return 0
cli.build_parser = lambda build=cli.build_parser: _with(build())
def _with(parser):
    parser.set_defaults(handler=handler)
    return parser
sys.argv = ["fedsched"]
code = cli.entry()
print(seen[0][0], seen[0][1] > 0, code)
"""


def test_the_program_raises_the_thresholds_and_freezes_what_start_up_made() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == f"{(YOUNG, MIDDLE, OLD)} True 0"


def test_main_leaves_the_calling_process_collector_alone() -> None:
    before = gc.get_threshold(), gc.get_freeze_count()
    assert main(["events", "list", "--json"]) == 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
