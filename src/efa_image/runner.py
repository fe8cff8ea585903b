"""Run external commands: log them, stream or capture output, explain failures.

Only the standard library is used here, so `python3 -m efa_image setup` works
before the virtualenv exists.
"""

from __future__ import annotations

import collections
import logging
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from efa_image.errors import EfaImageError

log = logging.getLogger("efa_image")

TAIL_LINES = 25


@dataclass(frozen=True)
class Result:
    returncode: int
    output: str


class CommandError(EfaImageError):
    """A command exited non-zero; the message carries its tail and exit code."""

    def __init__(
        self, argv: Sequence[str], returncode: int, tail: Sequence[str], output: str = ""
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.tail = list(tail)
        self.output = output
        shown = "\n".join(f"    {line}" for line in self.tail)
        message = f"`{shlex.join(self.argv)}` exited with {returncode}"
        if shown:
            message += f"; last lines:\n{shown}"
        super().__init__(message)


def last_line(output: str) -> str:
    """The last non-empty line: what a failed command says in one line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_command(
    argv: Sequence[str],
    *,
    check: bool = True,
    stream: bool = False,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    input_data: bytes | None = None,
    stdin: int | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Result:
    """Run argv; with stream=True echo its output as it comes (for long steps).

    The combined stdout/stderr is returned. A failure with check=True raises
    CommandError showing the last lines and the exit code.
    """
    log.debug("$ %s", shlex.join(argv))
    full_env = {**os.environ, **env} if env else None
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input_data is not None else stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
        )
    except FileNotFoundError as exc:
        raise EfaImageError(f"command not found: {argv[0]} (run `make setup`)") from exc
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        if stream:
            if proc.stdin is not None and input_data is not None:
                proc.stdin.write(input_data)
                proc.stdin.close()
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                lines.append(line)
                tail.append(line)
                print(f"  | {line}", flush=True)
            proc.wait(timeout=timeout)
        else:
            out, _ = proc.communicate(input=input_data, timeout=timeout)
            lines = out.decode(errors="replace").splitlines()
            tail.extend(lines)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise EfaImageError(f"`{shlex.join(argv)}` did not finish within {timeout:g}s") from exc
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, tail, "\n".join(lines))
    return Result(proc.returncode, "\n".join(lines))
