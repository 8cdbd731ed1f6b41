"""The Python examples (examples/python/) run and print what they promise."""
import pathlib
import runpy

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


@pytest.mark.parametrize("name", ["onnx_numpy.py", "engine_push.py"])
def test_example_runs(name, capsys):
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    if name == "onnx_numpy.py":
        assert "max |varq - numpy| = 0.0" in out
        assert "torch sees the same bytes: True" in out
    else:
        assert "['fill a', 'read a, write b', 'read b']" in out
        assert "failed as expected" in out
