import sys

import pytest

from efa_image.errors import EfaImageError
from efa_image.runner import CommandError, run_command


def test_captures_combined_output():
    result = run_command(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]
    )
    assert result.returncode == 0
    assert result.output.splitlines() == ["out", "err"]


def test_failure_shows_exit_code_and_last_lines():
    script = "import sys\nfor i in range(40): print(f'line {i}')\nsys.exit(3)"
    with pytest.raises(CommandError) as info:
        run_command([sys.executable, "-c", script])
    assert info.value.returncode == 3
    assert info.value.tail[-1] == "line 39"
    assert len(info.value.tail) == 25
    assert "exited with 3" in str(info.value) and "line 39" in str(info.value)
    assert "line 0\n" not in str(info.value)


def test_unchecked_failure_returns_code():
    assert run_command([sys.executable, "-c", "raise SystemExit(4)"], check=False).returncode == 4


def test_stream_echoes_lines(capsys):
    result = run_command([sys.executable, "-c", "print('a'); print('b')"], stream=True)
    assert result.output == "a\nb"
    assert capsys.readouterr().out == "  | a\n  | b\n"


def test_timeout_kills_and_explains():
    with pytest.raises(EfaImageError, match=r"did not finish within 0\.5s"):
        run_command([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_missing_command_names_setup():
    with pytest.raises(EfaImageError, match=r"command not found: no-such-tool-xyz.*make setup"):
        run_command(["no-such-tool-xyz"])


def test_input_data_reaches_stdin():
    result = run_command(
        [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], input_data=b"hello"
    )
    assert result.output == "HELLO"
