import runpy
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "agent_memory.py"


def test_the_agent_builders_example_learns_reuses_and_evicts(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", [str(EXAMPLE)])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "first try: 422 -> learned ['ADD_REQUIRED_PROMO_CODE']" in out
    assert "with the cached fix: 200" in out
    assert "after the rotation: live [] evicted ['row-changed']" in out
