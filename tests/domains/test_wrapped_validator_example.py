"""The runnable example of wrapping existing validation code (docs/providers.md) works."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "wrapped_validator.py"


def test_the_wrapped_validator_example_keys_the_card_fix_on_the_key_set():
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        'USE_REGISTERED_CARD {"parameters": {"card": "amex-1"}, "tables": [{"table": "cards", '
        '"version": "1.0.0", "membership": {"keys": ["mc-9"]}}]}'
    )
    assert lines[1].startswith('USE_BOOKED_TRAVELLER {"parameters": {"traveller": "Ada Lovelace"}')
    assert lines[2:] == [
        "with both fixes: 200",
        "balance after the booking: {'balance': 900}",
        "after a balance change: ['USE_BOOKED_TRAVELLER', 'USE_REGISTERED_CARD']",
        "after a new card: ['USE_BOOKED_TRAVELLER']",
        "without copy_on_write: policy 'booking_validator' writes to table 'cards' (key "
        "'amex-1', field 'balance'); validation code must not change reference data "
        "(wrapped_policy(..., copy_on_write=True) runs it on a throwaway copy)",
    ]
